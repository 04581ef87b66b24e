"""A transport that keeps messages in memory: for the simulator and tests.

Its thread key is deterministic (`<channel>-<alert id>`), so a simulated timeline
is the same on every run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from tickwarden.transports.base import Delivery, OutgoingMessage, conversation


@dataclass(frozen=True)
class RecordedMessage:
    channel: str
    alert_id: int | None
    thread_key: str
    reply: bool
    message: OutgoingMessage


class RecordingTransport:
    """Record every message; safe to share between replicas in one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.messages: list[RecordedMessage] = []

    def send(self, message: OutgoingMessage) -> Delivery:
        name = message.channel.tenant or "platform"
        if message.channel.audience == "shadow":
            name += "-shadow"
        subject = message.alert_id if message.alert_id is not None else conversation(message)
        thread_key = message.thread.key if message.thread else f"{name}-{subject}"
        with self._lock:
            self.messages.append(RecordedMessage(name, message.alert_id, thread_key, message.thread is not None, message))
            number = len(self.messages)
        return Delivery(message_id=f"{thread_key}.{number}", thread_key=thread_key)
