"""The lease reaper: attempts whose worker stopped renewing its lease are lost, or given back.

A pass marks every started attempt whose lease expired before `now` as `lost` and
moves its run down the same failure path as any failed attempt (pending_retry while
the tick has budget, failed otherwise). An attempt leased ahead and never started
(no step of it ran) is not lost: it goes back to the queue as its worker would have
given it back, its run's budget and verdict untouched, and its worker, if still
alive, can no longer start it. Both in `store.reap_leases`, one statement that
locks with SKIP LOCKED and compare-and-sets on `running`, so any number of reaper
replicas may pass at once and each attempt is reaped or given back once. The same pass marks
dead the environment instances their vanished worker left listed as live. A pass
first looks, in one read-only statement, whether there is anything to reap at all.

After the database was away (this replica could not reach it, or the server
restarted, when `server_restarts` is on), leases ran out because nobody could renew them, not because their
workers died: expired leases are then left alone for `resume_grace_seconds`, time
for live workers to renew them or record the results they hold.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from tickwarden import metrics
from tickwarden.db import Database
from tickwarden.errors import DatabaseUnavailable
from tickwarden.models import FinishedAttempt

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 15
BATCH = 500
RESUME_GRACE_SECONDS = 30  # a worker renews every lease/3 (10 s by default) and records within a second


class LeaseReaper:
    name = "lease-reaper"

    def __init__(self, db: Database, *, interval_seconds: float = INTERVAL_SECONDS, batch: int = BATCH,
                 resume_grace_seconds: float = RESUME_GRACE_SECONDS, server_restarts: bool = False):
        self.db = db
        self.interval = timedelta(seconds=interval_seconds)
        self.batch = batch
        self.resume_grace = timedelta(seconds=resume_grace_seconds)
        # Compare the server's real start time with `now`: only on the wall clock (the service),
        # never on the simulator's virtual one.
        self.server_restarts = server_restarts
        self.last_reaped: list[FinishedAttempt] = []  # marked lost by the last pass
        self.last_requeued: list[int] = []  # leased ahead, never started, given back by the last pass
        self._unreachable = False  # the previous pass could not reach the database
        self._hold_until: datetime | None = None

    def run_once(self, now: datetime) -> datetime:
        """Reap expired leases at `now`; come back at once while a full batch was found."""
        try:
            with self.db.probe() as store:
                waiting = store.execution.reaper_waiting(now)
                started = store.execution.reaper_server_started() if waiting and self.server_restarts else None
        except DatabaseUnavailable:
            self._unreachable = True
            raise
        if self._unreachable:
            self._unreachable, self._hold_until = False, now + self.resume_grace
        if not waiting:  # the usual pass: one read-only statement
            self.last_reaped, self.last_requeued = [], []
            return now + self.interval
        hold = self._hold_until
        # A server that started after `now` counts too: a pass that began during the outage
        # can get its connection only once the server is back, with `now` from before it.
        if started is not None and now < started + self.resume_grace:
            hold = max(hold or now, started + self.resume_grace)
        if hold is not None and now < hold:
            self.last_reaped, self.last_requeued = [], []
            return min(hold, now + self.interval)
        with self.db.transaction() as store:
            reaped = store.ledger.reap_leases(now, limit=self.batch)
            store.execution.abandon_environment_instances(now)
        self.last_reaped = reaped.lost
        self.last_requeued = reaped.requeued
        metrics.current().leases_expired(reaped.lost)
        for item in reaped.lost:
            log.warning("attempt %s lost its lease; run %s is now %s", item.attempt_id, item.run_id, item.run_status,
                        extra={"attempt_id": item.attempt_id, "run_id": item.run_id})
        if reaped.requeued:
            log.info("%s attempts leased ahead and never started went back to the queue: %s", len(reaped.requeued),
                     reaped.requeued)
        return now if len(reaped) >= self.batch else now + self.interval
