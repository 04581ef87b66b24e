"""Webhooks over HTTP: a signed JSON body with an idempotency key.

Signed the Standard Webhooks way (standardwebhooks.com): `webhook-id` (the
delivery's identity, the same on every retry), `webhook-timestamp` (the send time,
Unix seconds) and `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`,
so any Standard Webhooks library verifies it. A secret of the standard form
`whsec_<base64>` is decoded as the standard says; any other secret is the key's raw
bytes. The older `X-Tickwarden-Signature: sha256=<hex HMAC of the body>` is still
sent for receivers built against it. `X-Tickwarden-Timestamp` repeats the send time,
`Idempotency-Key` the delivery's identity (a receiver that saw it answers 2xx and
does nothing); times inside the body are UTC ISO 8601. 2xx is delivered; 408, 429 and 5xx, timeouts and refused
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
from datetime import datetime

import httpx
from standardwebhooks.webhooks import Webhook

from tickwarden.clock import isoformat_z
from tickwarden.transports.base import Delivery, OutgoingMessage, channel_secret, config_value, conversation
from tickwarden.transports.http import post_json

SIGNATURE_HEADER = "X-Tickwarden-Signature"
TIMESTAMP_HEADER = "X-Tickwarden-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"


def sign(secret: str, body: bytes) -> str:
    """Return the signature header value for a raw body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def standard_headers(secret: str, message_id: str, sent_at: datetime, body: bytes) -> dict[str, str]:
    """Return the Standard Webhooks headers of one delivery: its id, its time and the v1 signature."""
    key = Webhook(secret) if secret.startswith("whsec_") else Webhook(secret.encode())
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": key.sign(msg_id=message_id, timestamp=sent_at, data=body.decode()),
    }


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
        thread_key = message.thread.key if message.thread else conversation(message)
        body_data = {**message.rendered.payload, "thread": thread_key, "delivery": message.key,
                     "sent_at": isoformat_z(message.sent_at)}
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
            headers.update(standard_headers(secret, message.key, message.sent_at, body))
        timeout = float(channel.config.get("timeout") or self.timeout)
        post_json(url, None, what="webhook", timeout=timeout, headers=headers, client=self._client,
                  tenant_owned=channel.tenant_id is not None, body=body)
        return Delivery(message_id=message.key, thread_key=thread_key)
