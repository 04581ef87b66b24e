"""Check-in operations: ping keys (stored hashed, rate-limited per key) and the run transitions of reports."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickwarden.models import Attempt, Run, from_row
from tickwarden.store.base import StoreBase


@dataclass(frozen=True)
class KeyUse:
    """The workflow a ping key belongs to, and how many requests its current window has counted."""

    workflow_id: int
    tenant_id: int
    window_start: datetime
    window_count: int


class CheckinsRepository(StoreBase):
    def issue_key(self, workflow_id: int, tenant_id: int, key_hash: str, now: datetime) -> datetime:
        row = self._row("checkins_issue_key", {"workflow_id": workflow_id, "tenant_id": tenant_id,
                                               "key_hash": key_hash, "now": now})
        assert row is not None
        created_at: datetime = row["created_at"]
        return created_at

    def key_issued_at(self, workflow_id: int) -> datetime | None:
        row = self._row("checkins_key_issued_at", {"workflow_id": workflow_id})
        return row["created_at"] if row else None

    def use_key(self, key_hash: str, now: datetime, window_floor: datetime) -> KeyUse | None:
        """Count one request against the key's window; None when no workflow has this key."""
        row = self._row("checkins_use_key", {"key_hash": key_hash, "now": now, "window_floor": window_floor})
        return KeyUse(**row) if row else None

    def start_run(self, run_id: int, at: datetime, deadline_at: datetime) -> Run | None:
        row = self._row("checkins_start_run", {"run_id": run_id, "at": at, "deadline_at": deadline_at})
        return from_row(Run, row) if row else None

    def open_attempt(self, run: Run, worker_id: str, at: datetime) -> Attempt | None:
        """Open the attempt a terminal report finishes; None when the run already has a verdict."""
        row = self._row("checkins_open_attempt", {"run_id": run.id, "scheduled_for": run.scheduled_for,
                                                  "worker_id": worker_id, "at": at})
        return from_row(Attempt, row) if row else None
