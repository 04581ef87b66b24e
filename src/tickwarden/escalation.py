"""The escalation clock: each minute, promote the open warnings nobody acted on.

A warning becomes critical at `escalate_at = opened_at + multiplier × cadence`
(the cadence captured when the alert opened, so editing the schedule mid-incident
does not move it), or as soon as its consecutive confirmed failures reach
`escalate_after`. The evaluator promotes on failures the moment one arrives; this
clock catches the time rule and anything the evaluator could not finish.

Replicas: the pass selects due warnings through the partial index
alerts_open_warning_idx with `FOR UPDATE SKIP LOCKED`, and the update is a
compare-and-set on (open, warning), so each alert escalates once and writes one
`escalated` event, fanned out to the outbox in the same transaction.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tickwarden import alerts
from tickwarden.db import Database


class EscalationClock:
    """Promotes due warnings to critical."""

    name = "escalation"

    def __init__(self, db: Database, *, interval_seconds: float = 60, batch_size: int = 500):
        self.db = db
        self.interval = timedelta(seconds=interval_seconds)
        self.batch_size = batch_size
        self.last: list[int] = []

    def run_once(self, now: datetime) -> datetime:
        with self.db.probe() as store:
            waiting = store.escalations_waiting(now)
        if not waiting:  # the usual pass: one read-only statement
            self.last = []
            return now + self.interval
        with self.db.transaction() as store:
            self.last = alerts.escalate_due(store, now, self.batch_size)
        if len(self.last) >= self.batch_size:
            return now + timedelta(seconds=1)
        return now + self.interval
