"""Signed acknowledge links: the button in a message that acknowledges its one alert, without a login.

A link is `<public url>/ack/<token>`, the token `<alert id>.<expiry>.<nonce>.<signature>`:

- the signature is HMAC-SHA256 over `<alert id>.<expiry>.<nonce>` with a key derived from
  the platform secret (`TICKWARDEN_SECRET_KEY`, see `auth.secret_key`) for this purpose
  only, so a link can be neither altered (another alert, a later expiry) nor made up;
  keys listed in `TICKWARDEN_SECRET_KEYS_OLD` still verify links issued before a rotation;
- the expiry (Unix seconds) is checked against the injected clock, never the system's;
- the nonce is derived from the delivery (outbox row) the link was sent in, so a retried
  send carries the same link, and each delivery's link is distinct;
- a link acknowledges once: its digest is recorded in `ack_link_uses` in the very
  transaction that acknowledges the alert (`alerts.acknowledge`, the path the API, the
  CLI and the dashboard take), so a replay is refused even by another replica.

Holding a link grants exactly one act, acknowledging that alert; it shows the alert's
tenant, workflow and state, which the message that carried it already said.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tickwarden import auth
from tickwarden.secrets import OLD_KEYS_ENV

# How long a link sent with an event stays usable: an alert acknowledged a week later is
# better acknowledged in the dashboard, where the reader sees what happened since.
LINK_TTL = timedelta(days=7)
PURPOSE = b"tickwarden.ack-link.v1"
MAX_TOKEN_LENGTH = 120
_TOKEN = re.compile(r"^([1-9][0-9]{0,17})\.([0-9]{1,12})\.([0-9a-f]{16})\.([A-Za-z0-9_-]{43})$")


class LinkRefused(Exception):
    """The link cannot be used; `message` is one sentence for the page, `status` its HTTP status."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class AckLink:
    alert_id: int
    expires_at: datetime
    digest: str  # SHA-256 of the whole token: what records its use


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode(), PURPOSE, hashlib.sha256).digest()


def _signature(secret: str, payload: str) -> str:
    mac = hmac.new(_key(secret), payload.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def nonce_for(delivery_key: str) -> str:
    """The nonce of the link sent in one delivery: stable across its retries, distinct between deliveries."""
    return hashlib.sha256(delivery_key.encode()).hexdigest()[:16]


def issue(alert_id: int, expires_at: datetime, nonce: str, secret: str) -> str:
    """Return a token acknowledging `alert_id` until `expires_at`."""
    if not re.fullmatch(r"[0-9a-f]{16}", nonce):
        raise ValueError("the nonce must be 16 lowercase hex digits")
    payload = f"{alert_id}.{int(expires_at.timestamp())}.{nonce}"
    return f"{payload}.{_signature(secret, payload)}"


def verify(token: str, now: datetime, secret: str, old_secrets: tuple[str, ...] = ()) -> AckLink:
    """Check a token's shape, signature (current or an old key) and expiry at `now`; raise LinkRefused."""
    match = _TOKEN.match(token) if len(token) <= MAX_TOKEN_LENGTH else None
    if match is None:
        raise LinkRefused("This acknowledge link is not valid: it is incomplete or was altered.")
    alert, expiry, _nonce, signature = match.groups()
    payload = token.rsplit(".", 1)[0]
    if not any(hmac.compare_digest(_signature(key, payload), signature) for key in (secret, *old_secrets) if key):
        raise LinkRefused("This acknowledge link is not valid: it was altered or not issued by this tickwarden.")
    expires_at = datetime.fromtimestamp(int(expiry), UTC)
    if now >= expires_at:
        raise LinkRefused(f"This acknowledge link expired on {expires_at:%Y-%m-%d %H:%M} UTC; "
                          "open the alert in the dashboard to acknowledge it.", status=410)
    return AckLink(alert_id=int(alert), expires_at=expires_at, digest=hashlib.sha256(token.encode()).hexdigest())


def platform_secrets() -> tuple[str, tuple[str, ...]]:
    """Return the platform secret and the old ones still accepted (`TICKWARDEN_SECRET_KEYS_OLD`)."""
    old = tuple(k.strip() for k in os.environ.get(OLD_KEYS_ENV, "").split(",") if k.strip())
    return auth.secret_key(), old


def link_for(base_url: str, alert_id: int, event_at: datetime, delivery_key: str, secret: str) -> str:
    """The acknowledge URL sent with one delivery of an alert event."""
    token = issue(alert_id, event_at + LINK_TTL, nonce_for(delivery_key), secret)
    return f"{base_url.rstrip('/')}/ack/{token}"
