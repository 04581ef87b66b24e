"""Webhooks over HTTP: a signed JSON body with an idempotency key.

Headers: `X-Tickwarden-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed
with the channel secret>`, `X-Tickwarden-Timestamp` (the send time, Unix seconds;
also inside the body, so it is covered by the signature), `Idempotency-Key` (the
delivery's identity, the same on every retry: a receiver that saw it answers 2xx
and does nothing). 2xx is delivered; 408, 429 and 5xx, timeouts and refused
connections are retried; any other 4xx is permanent and disables the channel.

Channel config: `url` (required), `timeout` (seconds), `headers` (extra,
non-secret headers). The signing key comes from the channel's `secret_ref`;
without one the body is sent unsigned. A tenant's webhook may only reach addresses
the outbound policy allows (`outbound.py`); redirects are never followed.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx

from tickwarden import outbound
from tickwarden.transports.base import Delivery, OutgoingMessage, TransportError, channel_secret, config_value

SIGNATURE_HEADER = "X-Tickwarden-Signature"
TIMESTAMP_HEADER = "X-Tickwarden-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"


def sign(secret: str, body: bytes) -> str:
    """Return the signature header value for a raw body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str) -> bool:
    """Check a signature header in constant time (what a receiver does)."""
    return hmac.compare_digest(sign(secret, body), header or "")


class WebhookTransport:
    """POST alert events as signed JSON."""

    def __init__(self, *, timeout: float = 10.0, client: httpx.Client | None = None):
        self.timeout = timeout
        self._client = client

    def send(self, message: OutgoingMessage) -> Delivery:
        channel = message.channel
        url = str(config_value(channel, "url"))
        secret = channel_secret(message)
        timestamp = str(int(message.sent_at.timestamp()))
        thread_key = message.thread.key if message.thread else f"alert-{message.alert_id}"
        body_data = {**message.rendered.payload, "thread": thread_key, "delivery": message.key,
                     "sent_at": timestamp}
        body = json.dumps(body_data, separators=(",", ":"), sort_keys=True).encode()
        headers = {str(k): str(v) for k, v in (channel.config.get("headers") or {}).items()}
        headers.update({
            "Content-Type": "application/json",
            "User-Agent": "tickwarden-webhook/1",
            TIMESTAMP_HEADER: timestamp,
            IDEMPOTENCY_HEADER: message.key,
        })
        if secret:
            headers[SIGNATURE_HEADER] = sign(secret, body)
        timeout = float(channel.config.get("timeout") or self.timeout)
        tenant_owned = channel.tenant_id is not None
        try:
            if tenant_owned:
                # A tenant chose this URL: checked before and again at connect time (outbound.py).
                outbound.check_url(url)
            if self._client is not None:
                response = self._client.post(url, content=body, headers=headers, timeout=timeout)
            elif tenant_owned:
                with outbound.guarded_client(timeout) as client:
                    response = client.post(url, content=body, headers=headers)
            else:
                with httpx.Client(timeout=timeout, follow_redirects=False) as client:
                    response = client.post(url, content=body, headers=headers)
        except outbound.OutboundRefused as exc:
            raise TransportError(f"the webhook URL was refused: {exc.message}", permanent=True) from None
        except httpx.TimeoutException:
            raise TransportError("the webhook timed out", permanent=False) from None
        except httpx.HTTPError as exc:
            raise TransportError(f"the webhook is unreachable: {type(exc).__name__}", permanent=False) from None
        status = response.status_code
        if 200 <= status < 300:
            return Delivery(message_id=message.key, thread_key=thread_key)
        if status in (408, 429) or status >= 500:
            retry_after = _retry_after(response.headers.get("Retry-After"))
            raise TransportError(f"the webhook answered HTTP {status}", permanent=False, retry_after=retry_after)
        raise TransportError(f"the webhook answered HTTP {status}", permanent=True)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: the back-off decides
