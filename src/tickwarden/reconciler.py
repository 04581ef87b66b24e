"""The reconciler: converge an external trigger backend with the schedules in the database.

The built-in trigger needs none (the ticker fires straight from the schedules
table); a backend outside the database, such as Kubernetes CronJobs, does. One
pass, in one transaction:

1. Ask the backend for its drift: schedules whose trigger is missing or was built
   from another schedule version, and triggers whose schedule is paused or whose
   workflow is archived.
2. Rewrite the first, remove the second (bounded by `batch`; a full batch asks for
   an immediate next pass).
3. When anything changed, notify `tickwarden_wake` so sleeping tickers look again.

This is where schedule edits, pauses and resumes take effect for such a backend.
Replicas may run at once: writes are guarded by the schedule version (an entry
never goes back to an older version, and an entry is written only for a version
the schedule still has), deletes re-check that the schedule is still paused, and
whatever a race leaves behind is corrected by the next pass.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from tickwarden.db import Database
from tickwarden.triggers import TriggerBackend

log = logging.getLogger(__name__)

INTERVAL = timedelta(minutes=5)  # catalog changes wake it at once through NOTIFY; polling is the safety net


class Reconciler:
    name = "reconciler"

    def __init__(
        self, db: Database, backend: TriggerBackend, *, batch: int = 5000, interval: timedelta = INTERVAL
    ):
        self.db = db
        self.backend = backend
        self.batch = batch
        self.interval = interval

    def run_once(self, now: datetime) -> datetime:
        """Converge up to one batch of drift at `now`; return when to look again."""
        with self.db.transaction() as store:
            drift = self.backend.drift(store, now, self.batch)
            removed = self.backend.delete(store, drift.deletes, now) if drift.deletes else 0
            written = self.backend.upsert(store, drift.upserts, now) if drift.upserts else 0
            if written or removed:
                store.trigger.notify_wake("ticker")
        if written or removed:
            log.info("reconciler: %d trigger(s) written, %d removed", written, removed)
        full = len(drift.upserts) >= self.batch or len(drift.deletes) >= self.batch
        return now if full else now + self.interval
