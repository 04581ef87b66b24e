"""The lease reaper: attempts whose worker stopped renewing its lease are lost.

A pass marks every attempt whose lease expired before `now` as `lost` and moves
its run down the same failure path as any failed attempt (pending_retry while the
tick has budget, failed otherwise), all in `store.expire_leases`. The statement
locks with SKIP LOCKED and compare-and-sets on `running`, so any number of reaper
replicas may pass at once and each attempt is reaped once. The same pass marks
dead the environment instances their vanished worker left listed as live. A pass
first looks, in one read-only statement, whether there is anything to reap at all.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from tickwarden import metrics
from tickwarden.db import Database
from tickwarden.models import FinishedAttempt

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 15
BATCH = 500


class LeaseReaper:
    name = "lease-reaper"

    def __init__(self, db: Database, *, interval_seconds: float = INTERVAL_SECONDS, batch: int = BATCH):
        self.db = db
        self.interval = timedelta(seconds=interval_seconds)
        self.batch = batch
        self.last_reaped: list[FinishedAttempt] = []

    def run_once(self, now: datetime) -> datetime:
        """Reap expired leases at `now`; come back at once while a full batch was found."""
        with self.db.probe() as store:
            waiting = store.reaper_waiting(now)
        if not waiting:  # the usual pass: one read-only statement
            self.last_reaped = []
            return now + self.interval
        with self.db.transaction() as store:
            reaped = store.expire_leases(now, limit=self.batch)
            store.abandon_environment_instances(now)
        self.last_reaped = reaped
        metrics.current().leases_expired(reaped)
        for item in reaped:
            log.warning("attempt %s lost its lease; run %s is now %s", item.attempt_id, item.run_id, item.run_status,
                        extra={"attempt_id": item.attempt_id, "run_id": item.run_id})
        return now if len(reaped) >= self.batch else now + self.interval
