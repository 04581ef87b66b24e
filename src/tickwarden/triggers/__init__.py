"""Trigger backends: what turns active schedules into fired ticks.

The built-in trigger is no backend at all: each schedule row carries its next fire
time, written with the schedule, and the `Ticker` fires due schedules straight
from the table (`ticker.py`). Nothing converges, so nothing can lag.

A backend is for a world outside the database that must be converged towards the
schedules, the way the seed's reconciler converges Kubernetes CronJobs with the
schedules table (`TICKWARDEN_TRIGGER=kubernetes`, in `triggers/kubernetes.py`).
`Reconciler(db, backend)` drives one, inside its own transaction:

- `drift(store, now, limit)`: which schedules need their trigger created or
  rewritten (missing, or built from another `schedules.version`), and which
  triggers must go (schedule paused, workflow archived);
- `upsert(store, triggers, now)`: create or rewrite those triggers;
- `delete(store, schedule_ids, now)`: remove those triggers.

`needs_ticker` says whether tickwarden's own `Ticker` still fires the ticks; a
CronJob backend says False: its jobs record their ticks with `store.create_tick_runs`
(the same `ON CONFLICT DO NOTHING` insert, so a CronJob firing twice still makes one
run). The deadline detector arms each schedule's watermark from when it was written,
so a backend that converges late must not fire ticks from before its trigger existed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from tickwarden.store.trigger import DesiredTrigger

if TYPE_CHECKING:
    from tickwarden.store import Store


@dataclass(frozen=True)
class Drift:
    """The difference between the schedules and the backend: what to write and what to remove."""

    upserts: list[DesiredTrigger] = field(default_factory=list)
    deletes: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.upserts) + len(self.deletes)


class TriggerBackend(Protocol):
    name: str
    needs_ticker: bool

    def drift(self, store: Store, now: datetime, limit: int) -> Drift:
        """Return up to `limit` upserts and `limit` deletes that converge the backend."""

    def upsert(self, store: Store, triggers: Sequence[DesiredTrigger], now: datetime) -> int:
        """Create or rewrite the triggers; return how many were written."""

    def delete(self, store: Store, schedule_ids: Sequence[int], now: datetime) -> int:
        """Remove the triggers of these schedules; return how many were removed."""


__all__ = ["DesiredTrigger", "Drift", "TriggerBackend"]
