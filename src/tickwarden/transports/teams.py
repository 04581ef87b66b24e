"""Microsoft Teams through an incoming webhook (a Teams Workflows or connector URL): one Adaptive Card an event.

Teams webhooks cannot reply in a thread, so each event is its own card; the card
says which alert it belongs to and links to it. The webhook's URL carries its own
credential, so it comes from the channel's `secret_ref` and is never logged or put
in a message; channel config: `timeout` (seconds).

A connector that Teams throttles answers HTTP 200 with the error in its text
("…returned HTTP error 429…"): that is retried like a 429.
"""

from __future__ import annotations

from typing import Any

import httpx

from tickwarden.transports.base import (
    Delivery,
    OutgoingMessage,
    TransportError,
    channel_secret,
    conversation,
)
from tickwarden.transports.http import post_json

CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
STYLES = {"critical": "attention", "warning": "warning"}
THROTTLED = "HTTP error 429"
# Card text is Markdown: a tenant's error or workflow name must not become a link or change emphasis.
_MARKDOWN = str.maketrans({"[": "\\[", "]": "\\]", "*": "\\*", "_": "\\_"})


def plain(value: object) -> str:
    """Return text that a card shows as typed: Markdown markers escaped, links not followable."""
    return str(value).translate(_MARKDOWN).replace("://", ":\u2060//")


def card(message: OutgoingMessage) -> dict[str, Any]:
    """The Adaptive Card of one event: the headline, the facts, the error, a link to the alert."""
    facts = message.rendered.payload
    alert = facts.get("alert") or {}
    resolved = facts.get("event") == "resolved"
    rows = [
        ("Tenant", facts.get("tenant")), ("Workflow", facts.get("workflow")),
        ("Severity", str(alert.get("severity") or facts.get("severity") or "").upper()),
        ("Owner", alert.get("owner")), ("Failures", alert.get("failure_count")),
        ("Alert", f"#{alert.get('id')}" if alert.get("id") else None),
    ]
    tick = facts.get("tick") or {}
    attempt = tick.get("last_attempt") or {}
    if not resolved:
        rows += [("Category", facts.get("error_category")), ("Failed step", facts.get("failed_step")),
                 ("Tick", tick.get("tick")), ("Due", tick.get("due_at")),
                 ("Deadline expired", tick.get("deadline_expired_at")),
                 ("Last attempt", f"#{attempt.get('number')} ({attempt.get('status')}) on "
                                  f"{attempt.get('worker') or 'no worker'}, {attempt.get('started_at') or '—'} → "
                                  f"{attempt.get('finished_at') or '—'}" if attempt else None)]
    else:
        rows.append(("Downtime (s)", alert.get("downtime_seconds")))
        recovered = tick.get("recovered") or {}
        rows += [("Recovered at", recovered.get("at")), ("By run", recovered.get("run_id"))]
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": plain(facts.get("summary") or "tickwarden alert"), "weight": "Bolder",
         "size": "Medium", "wrap": True,
         "color": "Good" if resolved else STYLES.get(str(facts.get("severity")), "default").capitalize()},
        {"type": "FactSet", "facts": [{"title": title, "value": plain(value)} for title, value in rows
                                      if value not in (None, "")]},
    ]
    if facts.get("error") and not resolved:
        body.append({"type": "TextBlock", "text": plain(facts["error"]), "wrap": True, "fontType": "Monospace"})
    if facts.get("log_tail") and not resolved:
        body.append({"type": "TextBlock", "text": plain(facts["log_tail"]), "wrap": True, "fontType": "Monospace"})
    content: dict[str, Any] = {"$schema": CARD_SCHEMA, "type": "AdaptiveCard", "version": "1.4", "body": body}
    link = str(alert.get("link") or "")
    if link.startswith(("https://", "http://")):
        content["actions"] = [{"type": "Action.OpenUrl", "title": "View alert", "url": link}]
    return {"type": "message",
            "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
                             "content": content}]}


class TeamsTransport:
    """Post alert events to a Microsoft Teams channel as Adaptive Cards."""

    def __init__(self, *, timeout: float = 10.0, client: httpx.Client | None = None):
        self.timeout = timeout
        self._client = client

    def send(self, message: OutgoingMessage) -> Delivery:
        channel = message.channel
        url = channel_secret(message)
        if not url:
            raise TransportError(f"channel {channel.label} has no secret_ref for its Teams webhook URL",
                                 permanent=True)
        if not url.startswith(("https://", "http://")):
            raise TransportError(f"channel {channel.label}: its Teams webhook secret is not an http(s) URL",
                                 permanent=True)
        timeout = float(channel.config.get("timeout") or self.timeout)
        response = post_json(url, card(message), what="Teams", timeout=timeout, client=self._client,
                             tenant_owned=channel.tenant_id is not None)
        if THROTTLED in response.text:
            raise TransportError("Teams throttled the webhook (HTTP error 429)", permanent=False)
        thread = message.thread.key if message.thread else conversation(message)
        return Delivery(message_id=message.key, thread_key=thread)
