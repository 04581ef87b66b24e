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

A network outage need not show as either: the server keeps running, and a pass that
began during it waits for its answer instead of failing, or the outage fits between two
passes. On the wall clock (`monotonic` given, as `server_restarts` gives it) the reaper
therefore also judges from its own looks, one per pass, each known to have reached the
server between the pass's `now` and its answer (`now` plus the wait `monotonic` measured).
The invariant: a pass reaps only leases expired for `LATE_SECONDS`, and only when, over
the last `resume_grace_seconds`, no two of its consecutive looks were more than
`blind_seconds` apart (from the start of one to the answer of the next); a reaper's
first look holds too, it saw nothing before it. Why that spares live workers: a worker
renews on a fixed beat every third of its lease (the first a third after it took the
lease at full length), each renewal landing within `LATE_SECONDS` of its beat, so a live
worker's lease expired that long means its last three beats failed: an outage spanning
two thirds of the lease (20 s for the default 30 s). A span without a look that long is
a gap above `blind_seconds` (18 s; passes are 15 s apart), after which the reaper holds
until `resume_grace_seconds` (30 s, more than the third of a lease to the worker's next
beat) past the look that ended it, and by then every live worker has renewed. That holds
for leases of 27 s and more (`blind_seconds` at most two thirds of the lease); a shorter
lease needs a smaller `blind_seconds` and passes closer together than it. Each
replica judges from its own looks, and an outage of the server is a gap in all of them.
On the virtual clock a caller that knows a lease has run out (`expired`: the simulator,
whose worker took every lease) spares the pass its look: the look only decides whether to
go on, and a reap that finds nothing to act on writes nothing, so the ledger is the same.
A partition that cuts off some workers while the reaper still reaches the server is,
to the reaper, indistinguishable from those workers dying: their started attempts are lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from tickwarden import metrics
from tickwarden.db import Database
from tickwarden.errors import DatabaseUnavailable
from tickwarden.models import FinishedAttempt

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 15
BATCH = 500
RESUME_GRACE_SECONDS = 30  # a worker renews every lease/3 (10 s by default) and records within a second
BLIND_SECONDS = 18  # under two thirds of the default 30 s lease, above the 15 s between passes
LATE_SECONDS = 2  # how late a live worker's renewal may land after its beat


class LeaseReaper:
    name = "lease-reaper"

    def __init__(self, db: Database, *, interval_seconds: float = INTERVAL_SECONDS, batch: int = BATCH,
                 resume_grace_seconds: float = RESUME_GRACE_SECONDS, server_restarts: bool = False,
                 blind_seconds: float = BLIND_SECONDS, monotonic: Callable[[], float] | None = None,
                 expired: Callable[[datetime], bool] | None = None):
        self.db = db
        self.interval = timedelta(seconds=interval_seconds)
        self.batch = batch
        self.resume_grace = timedelta(seconds=resume_grace_seconds)
        # Compare the server's real start time with `now`, and time the reaper's own looks:
        # only on the wall clock (the service), never on the simulator's virtual one, whose
        # passes are far apart by design and whose database never goes away.
        self.server_restarts = server_restarts
        self.monotonic = monotonic if monotonic is not None else time.monotonic if server_restarts else None
        self.blind = timedelta(seconds=blind_seconds)
        self.late = timedelta(seconds=LATE_SECONDS if self.monotonic is not None else 0)
        # Whether the caller knows that a running attempt's lease has run out by a cutoff; it
        # replaces the look only on the virtual clock, where looks are no evidence of reaching the server.
        self.expired = expired if self.monotonic is None and not server_restarts else None
        self.last_reaped: list[FinishedAttempt] = []  # marked lost by the last pass
        self.last_requeued: list[int] = []  # leased ahead, never started, given back by the last pass
        self._unreachable = False  # the previous pass could not reach the database
        self._hold_until: datetime | None = None
        self._looked: datetime | None = None  # the `now` of the last look that reached the database

    def run_once(self, now: datetime) -> datetime:
        """Reap expired leases at `now`; come back at once while a full batch was found."""
        began = self.monotonic() if self.monotonic is not None else 0.0
        # The pass judges, and stamps what it reaps, as a pass begun `late` earlier would
        # (any pass may run late): a lease counts as expired only once its renewal is overdue.
        cutoff = now - self.late
        known = self.expired is not None and self.expired(cutoff)  # then the look would find it: no look
        waiting, started = known, None
        try:
            if not known:
                with self.db.probe() as store:
                    waiting = store.execution.reaper_waiting(cutoff)
                    started = store.execution.reaper_server_started() if waiting and self.server_restarts else None
        except DatabaseUnavailable:
            self._unreachable = True
            raise
        if self._unreachable:
            self._unreachable = False
            self._hold(now + self.resume_grace)
        if self.monotonic is not None:
            answered = now + timedelta(seconds=self.monotonic() - began)
            if self._looked is None or answered - self._looked > self.blind:
                self._hold(answered + self.resume_grace)
            self._looked = now
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
        try:
            # Pipelined: BEGIN goes out with the reaping, and the abandon with the COMMIT (one round
            # trip for the reaping, one for the commit). The statements run in the order sent.
            with self.db.transaction(pipelined=True) as store:
                reaped = store.ledger.reap_leases(cutoff, limit=self.batch)
                # After the reaping, so a busy instance whose worker's attempts it just marked lost is
                # abandoned in this pass; its count is not read (no round trip of its own when pipelined).
                store.execution.send_abandon_environment_instances(cutoff)
        except DatabaseUnavailable:
            if known:  # this pass's first statement, as its look would have been
                self._unreachable = True
            raise
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

    def _hold(self, until: datetime) -> None:
        """Leave expired leases alone until `until` at least (a hold is only ever lengthened)."""
        if self._hold_until is None or until > self._hold_until:
            self._hold_until = until
