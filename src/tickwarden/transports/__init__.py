"""Transports: how a rendered message reaches Slack, an SMTP server, a webhook or memory."""

from __future__ import annotations

from tickwarden.transports.base import Delivery, OutgoingMessage, Transport, TransportError


def default_transports() -> dict[str, Transport]:
    """Return one transport per channel kind, talking to the real services."""
    from tickwarden.transports.email import EmailTransport
    from tickwarden.transports.recording import RecordingTransport
    from tickwarden.transports.slack import SlackTransport
    from tickwarden.transports.webhook import WebhookTransport

    return {
        "slack": SlackTransport(),
        "email": EmailTransport(),
        "webhook": WebhookTransport(),
        "recording": RecordingTransport(),
    }


__all__ = ["Delivery", "OutgoingMessage", "Transport", "TransportError", "default_transports"]
