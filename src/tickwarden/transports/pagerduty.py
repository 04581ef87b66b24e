"""PagerDuty through the Events API v2: one incident per alert, opened, acknowledged and resolved.

The dedup key is the alert (`tickwarden-alert-<id>`), so every event of one alert
lands on one PagerDuty incident, and a delivery repeated after a crash is folded
into it instead of paging twice:

    opened, escalated, reassigned, failed  ─►  trigger      (a later trigger updates the incident)
    acknowledged                            ─►  acknowledge
    resolved                                ─►  resolve
    anything else (a note)                  ─►  nothing to page about: delivered without a request

A channel test triggers and at once resolves an incident of its own key, so a
working route is proven without leaving anything open.

Channel config: `url` (default PagerDuty's, a local server in tests), `timeout`
(seconds), `source` (what PagerDuty shows as the origin; default `tickwarden`).
The integration's routing key comes from the channel's `secret_ref`; it is never
logged or put in a message.
"""

from __future__ import annotations

from typing import Any

import httpx

from tickwarden.clock import isoformat_z
from tickwarden.transports.base import (
    Delivery,
    OutgoingMessage,
    TransportError,
    channel_secret,
)
from tickwarden.transports.http import post_json

DEFAULT_URL = "https://events.pagerduty.com/v2/enqueue"
ACTIONS = {
    "opened": "trigger", "escalated": "trigger", "reassigned": "trigger", "failed": "trigger",
    "acknowledged": "acknowledge", "resolved": "resolve",
}
SEVERITIES = {"critical": "critical", "warning": "warning"}
SUMMARY_LIMIT = 1024  # PagerDuty truncates longer summaries


def dedup_key(message: OutgoingMessage) -> str:
    """One PagerDuty incident per alert, per platform alert, or per channel for a channel test."""
    platform = message.rendered.payload.get("platform_alert")
    if isinstance(platform, dict) and platform.get("id") is not None:
        return f"tickwarden-platform-alert-{platform['id']}"
    if message.alert_id is None:
        return f"tickwarden-test-channel-{message.channel.id}"
    return f"tickwarden-alert-{message.alert_id}"


def event_body(message: OutgoingMessage, routing_key: str, action: str) -> dict[str, Any]:
    """The Events API v2 body of one action on the alert's incident."""
    facts = message.rendered.payload
    alert = facts.get("alert") or {}
    body: dict[str, Any] = {"routing_key": routing_key, "event_action": action, "dedup_key": dedup_key(message)}
    if action != "trigger":
        return body
    body["payload"] = {
        "summary": str(facts.get("summary") or "tickwarden alert")[:SUMMARY_LIMIT],
        "source": str(message.channel.config.get("source") or "tickwarden"),
        "severity": SEVERITIES.get(str(alert.get("severity") or facts.get("severity")), "error"),
        "timestamp": isoformat_z(message.sent_at),
        "component": facts.get("workflow"),
        "group": facts.get("tenant"),
        "class": facts.get("error_category"),
        "custom_details": {
            "alert": alert.get("id"), "event": facts.get("event"), "owner": alert.get("owner"),
            "failure_count": alert.get("failure_count"), "failed_step": facts.get("failed_step"),
            "error": facts.get("error"), "first_failure_at": alert.get("first_failure_at"),
            "tick": facts.get("tick"), "log_tail": facts.get("log_tail"), "link": alert.get("link"),
        },
    }
    link = str(alert.get("link") or "")
    if link.startswith(("https://", "http://")):
        body["links"] = [{"href": link, "text": "The alert in tickwarden"}]
    return body


class PagerDutyTransport:
    """Send alert events to a PagerDuty service through its Events API v2 integration."""

    def __init__(self, *, url: str | None = None, timeout: float = 10.0, client: httpx.Client | None = None):
        self.url = url
        self.timeout = timeout
        self._client = client

    def send(self, message: OutgoingMessage) -> Delivery:
        channel = message.channel
        routing_key = channel_secret(message)
        if not routing_key:
            raise TransportError(f"channel {channel.label} has no secret_ref for its PagerDuty routing key",
                                 permanent=True)
        key = dedup_key(message)
        event = str(message.rendered.payload.get("event") or "")
        if message.alert_id is None and not message.rendered.payload.get("platform_alert"):  # a channel test
            self._post(message, event_body(message, routing_key, "trigger"))
            self._post(message, event_body(message, routing_key, "resolve"))
            return Delivery(message_id=key, thread_key=key)
        action = ACTIONS.get(event)
        if action is None:
            return Delivery(message_id=f"{key}.{event or 'event'}", thread_key=key)
        self._post(message, event_body(message, routing_key, action))
        return Delivery(message_id=f"{key}.{message.key}", thread_key=key)

    def _post(self, message: OutgoingMessage, body: dict[str, Any]) -> None:
        url = str(message.channel.config.get("url") or self.url or DEFAULT_URL)
        timeout = float(message.channel.config.get("timeout") or self.timeout)
        response = post_json(url, body, what="PagerDuty", timeout=timeout, client=self._client,
                             tenant_owned=message.channel.tenant_id is not None)
        answer = _json(response)
        if answer.get("status") not in (None, "success"):
            raise TransportError(f"PagerDuty did not accept the event: {answer.get('status')}", permanent=False)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
