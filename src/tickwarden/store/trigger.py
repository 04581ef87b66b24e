"""Trigger operations: the ticker claims due schedules and sleeps until the earliest fire time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickwarden.store.base import StoreBase
from tickwarden.store.queries import queries


@dataclass(frozen=True)
class DueSchedule:
    """A claimed, due schedule with what the ticker needs to turn ticks into runs."""

    schedule_id: int
    tenant_id: int
    workflow_id: int
    cron: str
    timezone: str
    next_fire_at: datetime
    starting_deadline_seconds: int
    cadence_seconds: int
    monitoring_enabled: bool
    timeout_seconds: int | None
    policy_overrides: str
    kind: str = "managed"


@dataclass(frozen=True)
class Advance:
    schedule_id: int
    next_fire_at: datetime | None
    last_fired_at: datetime | None


class TriggerRepository(StoreBase):
    def claim_due(self, now: datetime, limit: int) -> list[DueSchedule]:
        """Lock up to `limit` due schedules (earliest first) for this transaction."""
        with self.conn.cursor() as cur:
            # Tuples, not dicts: at 100,000 schedules per pass the row factory shows.
            cur.execute(queries()["trigger_claim_due"], {"now": now, "limit": limit})
            return [DueSchedule(*row) for row in cur.fetchall()]

    def earliest_fire(self) -> datetime | None:
        row = self._row("trigger_earliest_fire")
        return row["next_fire_at"] if row else None

    def notify_wake(self, loop: str) -> None:
        self._rows("trigger_notify_wake", {"loop": loop})
