"""Outbox operations: alert events become one delivery row per channel."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tickwarden.store.base import StoreBase

NOTIFYING_EVENTS = ("opened", "escalated", "reassigned", "resolved")


class OutboxStore(StoreBase):
    def enqueue_notifications(self, event_ids: Sequence[int], now: datetime) -> int:
        """Write the outbox rows for these events (idempotent); return how many were new."""
        if not event_ids:
            return 0
        return len(self._rows("enqueue_notifications", {"event_ids": list(event_ids), "now": now}))
