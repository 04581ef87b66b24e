"""Who a run acts as, and the credential its steps present.

Before a run executes, the worker checks its publisher: a user recorded for the
workflow, of the workflow's tenant, still active (`authenticate`). A deactivated or
missing publisher is a permanent `auth` failure, never retried. A step's code is given
a short-lived run credential (`issue_run_credential`) signed for its attempt, naming the
tenant, the workflow, the publisher and the tick; the API checks its signature and its
age against the injected clock (`verify_run_credential`).

The signing key is `TICKWARDEN_SECRET_KEY`; without it, a key generated once into
the data directory. The secret store derives its own key from the same one
(`secrets.derive_key`), so every process that reads tenant secrets must share it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tickwarden.db import data_dir
from tickwarden.models import User

SECRET_ENV = "TICKWARDEN_SECRET_KEY"
KEY_FILE = "secret_key"
CREDENTIAL_SECONDS = 300


class AuthError(Exception):
    """The run cannot act as its publisher."""


@dataclass(frozen=True)
class Identity:
    user_id: int
    tenant_id: int


class _Expired(Exception):
    """A credential validly signed, but older than its lifetime (or stamped in the future)."""


class _BadSignature(Exception):
    """A credential not signed with any of the keys tried, or not shaped as one."""


# Credentials are itsdangerous `TimestampSigner` tokens, byte for byte (`payload.stamp.mac`,
# unpadded URL-safe base64; the MAC is HMAC-SHA1 under sha1(salt + "signer" + key), its
# "django-concat" derivation), so tokens issued before and after this code verify alike.
# Signed here directly: the worker signs one per attempt, and building a signer for each (key
# derivation, key list, bytes coercions) cost several times the MAC itself.
@functools.lru_cache(maxsize=32)
def _mac(key: str | bytes, salt: str) -> hmac.HMAC:
    """The keyed HMAC of (key, salt), before any message: `copy()` it, never update it.

    Kept per key (a process signs with one key, and verifies with it and the few old keys
    of a rotation), so the key's derivation and the HMAC's key schedule are paid once.
    """
    raw = key.encode() if isinstance(key, str) else key
    return hmac.new(hashlib.sha1(salt.encode() + b"signer" + raw).digest(), digestmod=hashlib.sha1)


# json.dumps with options builds an encoder at every call: this one is built once.
_COMPACT_SORTED = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def _unb64(text: bytes) -> bytes:
    return base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))


def _sign(payload: str, now: datetime, key: str, salt: str) -> str:
    """`payload`, stamped with `now` (whole seconds), and signed with `key` under `salt`."""
    value = payload.encode() + b"." + _b64(struct.pack(">Q", int(now.timestamp())).lstrip(b"\x00"))
    mac = _mac(key, salt).copy()
    mac.update(value)
    return (value + b"." + _b64(mac.digest())).decode()


def _unsign(token: str, now: datetime, keys: Sequence[str], salt: str, max_age: int) -> bytes:
    """The payload of `token` if one of `keys` (tried in order) signed it under `salt` within `max_age` of `now`.

    The signature is checked first, in constant time against each key; only a validly
    signed token's age is judged (`_Expired`: older than `max_age`, or stamped after
    `now`). Anything else is `_BadSignature`.
    """
    try:
        raw = token.encode("ascii")
        value, signature = raw.rsplit(b".", 1)
        given = _unb64(signature)
    except (UnicodeEncodeError, ValueError):
        raise _BadSignature() from None
    for key in keys:
        mac = _mac(key, salt).copy()
        mac.update(value)
        if hmac.compare_digest(mac.digest(), given):
            break
    else:
        raise _BadSignature()
    payload, dot, stamp = value.rpartition(b".")
    if not dot:
        raise _BadSignature()
    try:
        signed_at = struct.unpack(">Q", _unb64(stamp).rjust(8, b"\x00"))[0]  # 8 bytes at most
    except (ValueError, struct.error):
        raise _BadSignature() from None
    age = int(now.timestamp()) - signed_at
    if age > max_age or age < 0:
        raise _Expired()
    return payload


def secret_key(directory: Path | None = None) -> str:
    """Return the signing key: the environment's, or one generated once per data directory."""
    configured = os.environ.get(SECRET_ENV, "").strip()
    if configured:
        return configured
    root = directory or data_dir()
    # 0700: the data directory holds this key and the embedded database, and an
    # environment process (another uid) must not even list it.
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = root / KEY_FILE
    if not path.exists():
        candidate = secrets.token_urlsafe(32)
        try:
            # O_EXCL: two workers starting together write one key, the loser reads it.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(candidate)
    key = path.read_text().strip()
    if not key:
        raise AuthError(f"the signing key file {path} is empty")
    return key


def authenticate(publisher: User | None, tenant_id: int) -> Identity:
    """Act as the publisher of a workflow: the identity it runs as; raise AuthError.

    1. No publisher recorded, or one of another tenant: refuse.
    2. The user must still be active.

    No credential is issued for this: one signed and verified at once with the same key
    and clock could only verify, so it proved nothing and cost two HMACs and a JSON
    round trip at every attempt. What a step's code may present is the run credential
    (`issue_run_credential`), signed for the attempt.
    """
    if publisher is None:
        raise AuthError("the workflow has no publisher to run as")
    if publisher.tenant_id != tenant_id:
        raise AuthError("the publisher does not belong to the workflow's tenant")
    if not publisher.active:
        raise AuthError("the publisher of this workflow is deactivated")
    return Identity(publisher.id, tenant_id)


RUN_SALT = "tickwarden.run"
# What a run credential names, and nothing else.
RUN_CLAIMS = frozenset({"tenant", "workflow", "publisher", "scheduled_for", "attempt"})


@dataclass(frozen=True)
class RunKey:
    """What identifies one execution to the customer's code: (tenant, workflow, scheduled_for, attempt).

    `idempotency_key` leaves the attempt out on purpose: a retry or a redelivery of the
    same tick must be recognised as the same write.
    """

    tenant: str
    workflow: str
    scheduled_for: datetime
    attempt: int
    publisher: str

    @functools.cached_property
    def idempotency_key(self) -> str:
        """Computed once per key (a run's environment names it twice, and its credential once more)."""
        return f"{self.tenant}/{self.workflow}/{self.scheduled_for.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def issue_run_credential(run: RunKey, now: datetime, key: str) -> str:
    """Return a short-lived signed credential naming the tenant, the publisher and the run key."""
    payload = _COMPACT_SORTED.encode({"tenant": run.tenant, "workflow": run.workflow, "publisher": run.publisher,
                                      "scheduled_for": run.idempotency_key.rsplit("/", 1)[1],
                                      "attempt": run.attempt})
    return _sign(payload, now, key, RUN_SALT)


def verify_run_credential(token: str, now: datetime, keys: str | Sequence[str],
                          max_age: int = CREDENTIAL_SECONDS) -> dict[str, Any]:
    """Check a run credential's signature and age at `now`; return what it names.

    `keys` is the platform key, or it and the previous keys still accepted while a rotation
    settles (the current one first). Any other shape of credential is refused: a tenant's
    code chooses what it sends.
    """
    ordered = [keys] if isinstance(keys, str) else list(keys)
    if len(token) > 4096 or not ordered:
        raise AuthError("the run credential is not validly signed")
    try:
        raw = _unsign(token, now, ordered, RUN_SALT, max_age)
        claims = json.loads(raw)
    except _Expired:
        raise AuthError("the run credential has expired") from None
    except (_BadSignature, ValueError):
        raise AuthError("the run credential is not validly signed") from None
    if not isinstance(claims, dict) or set(claims) != RUN_CLAIMS:
        raise AuthError("the run credential is not validly signed")
    return claims
