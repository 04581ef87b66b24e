"""Transports: how a rendered message reaches Slack, an SMTP server, a webhook, PagerDuty, Teams or memory."""

from __future__ import annotations

from tickwarden.transports.base import Delivery, OutgoingMessage, Transport, TransportError


def default_transports() -> dict[str, Transport]:
    """Return one transport per channel kind, talking to the real services."""
    from tickwarden.transports.email import EmailTransport
    from tickwarden.transports.pagerduty import PagerDutyTransport
    from tickwarden.transports.recording import RecordingTransport
    from tickwarden.transports.slack import SlackTransport
    from tickwarden.transports.teams import TeamsTransport
    from tickwarden.transports.webhook import WebhookTransport

    return {
        "slack": SlackTransport(),
        "email": EmailTransport(),
        "webhook": WebhookTransport(),
        "recording": RecordingTransport(),
        "pagerduty": PagerDutyTransport(),
        "teams": TeamsTransport(),
    }


__all__ = ["Delivery", "OutgoingMessage", "Transport", "TransportError", "default_transports"]
