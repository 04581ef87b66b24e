"""The deadline detector: a missing outcome is a failure too.

Exception capture can only see code that reports an error; it cannot prove that
every due tick ever ran. This loop compares what should exist with what does, and
writes the verdict `missed` where an outcome is absent. From there a missed run
follows the ordinary failure path (the same `alerts.evaluate_batch` as the poller):
one alert per workflow, updated, never repeated per pass, because alerts are state.

One pass:

1. Overdue runs. Runs still queued, running or pending a retry past their
   `deadline_at` (`profile.run_deadline`) get the verdict `missed` (category
   `missed`), their queued attempts cancelled. A run whose attempt is running on an
   expired lease is left to the lease reaper, which fails that attempt so that it
   is retried within its budget.
2. Ticks that never ran. Every active schedule has a watermark (`tick_audits`):
   all its ticks up to `checked_until` have a run. The watermark starts when the
   schedule was published or last changed, and never more than `lookback` ago.
   Its `next_check_at` is the next tick after the watermark plus the grace
   (`max(starting_deadline, 60 s)`: by then the trigger has recorded the tick or
   never will; for an external workflow, the deadline of a tick whose job never
   reported, since its first report may be what records it). A pass takes only due watermarks (an index range scan, with
   `FOR UPDATE SKIP LOCKED` so replicas take disjoint schedules), walks the cron
   expression from the watermark to `now − grace`, inserts every walked tick as a
   `missed` run with ON CONFLICT DO NOTHING on the one-run-per-tick index (ticks
   that have a run are untouched; those the audit's read already found with a run are
   not sent, and a pass with none left reads nothing back), and advances the watermark. The cost is one
   cron step per tick that became due since the last pass, whatever the fleet size.
   A watermark is armed (created, or re-armed after an edit, pause or resume) by the
   first pass after the schedule's write, which lists the schedule (`tick_audit_arms`,
   kept by a trigger on schedules): a pass looks only at the schedules listed since the
   last one, not at every schedule against every watermark.
3. Evaluate the workflows that got a `missed` verdict in 1 or 2, in the same
   transaction under a savepoint (as the poller does): a fault in the evaluation
   leaves the verdicts written, and the workflows are evaluated one by one.

The pass's transaction runs in pipeline mode, and every statement of it runs the plan the
server makes once per connection and keeps (`execution_generic_plans`, sent behind the BEGIN:
a statement more, no round trip more; the BEGIN no longer waits on its own, one fewer). Under
the server's default (`plan_cache_mode` auto) the closing of step 1 (then in
`monitoring_lock_overdue_and_arm`) was planned afresh at every pass, its fresh plans
estimated cheaper than the kept one: on a ledger of 16 months 3.5-4.7 ms of planning a
pass (300 passes of 8 overdue runs), more than its 0.7-1 ms of running. No month bounds the
search for overdue runs, so a fresh plan walks every month's open runs by deadline as the
kept one does. The closing itself (`monitoring_close_overdue`) is sent only by a pass that
locked overdue runs, told their ids and months; the evaluation's statements are the
poller's (see `poller`); the missed ticks' insert and the watermarks' writes go by key.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwarden import alerts, metrics, profile
from tickwarden.cadence import HORIZON, CronSchedule, parse_schedule
from tickwarden.db import Database
from tickwarden.alerts import EvaluationReport
from tickwarden.sanitize import sanitize_error
from tickwarden.store.monitoring import TickAudit

log = logging.getLogger(__name__)

OVERDUE_ERROR = "no outcome by the run's deadline"
NEVER_RAN_ERROR = "the tick never ran"
MIN_GRACE_SECONDS = 60


@dataclass
class DeadlineResult:
    overdue_runs: list[int] = field(default_factory=list)
    missed_ticks: list[tuple[int, datetime]] = field(default_factory=list)  # (workflow, tick)
    audited_schedules: int = 0
    evaluation: EvaluationReport = field(default_factory=EvaluationReport)
    full: bool = False


def _audit_grace(audit: TickAudit) -> timedelta:
    """How long after a tick the audit waits before recording it missed.

    A managed tick is recorded by its trigger by its starting deadline (at least a
    minute). An external tick may be recorded only by its job's first report, which
    may come as late as its deadline when no trigger records it (the Kubernetes trigger
    gives external workflows no CronJob): the audit waits for that deadline
    (`profile.external_run_deadline`, not started), so a report within it is never
    refused as late, and an absent one is missed exactly then.
    """
    return _grace(audit.kind, audit.cadence_seconds, audit.starting_deadline_seconds)


@functools.lru_cache(maxsize=1024)
def _grace(kind: str, cadence_seconds: int, starting_deadline_seconds: int) -> timedelta:
    """`_audit_grace` of the columns it reads: a function of them alone, worked out once per distinct triple.

    A pass takes up to a batch of audits (some 14,500 a simulated day of 1,000 workflows)
    and a fleet has a handful of distinct triples.
    """
    if kind == "external":
        return timedelta(seconds=profile.deadline_grace_seconds(cadence_seconds))
    return timedelta(seconds=max(starting_deadline_seconds, MIN_GRACE_SECONDS))


@functools.lru_cache(maxsize=8192)
def _schedule(cron: str, timezone: str) -> CronSchedule:
    return parse_schedule(cron, timezone)


class DeadlineDetector:
    """Records missed verdicts for overdue runs and for ticks that never ran."""

    name = "deadlines"

    def __init__(
        self,
        db: Database,
        *,
        lookback: timedelta = timedelta(hours=24),
        interval_seconds: float = 60,
        batch_size: int = 500,
        max_ticks_per_schedule: int = 500,
    ):
        self.db = db
        self.lookback = lookback
        self.interval = timedelta(seconds=interval_seconds)
        self.batch_size = batch_size
        self.max_ticks = max_ticks_per_schedule
        self.last = DeadlineResult()

    def detect(self, now: datetime) -> DeadlineResult:
        """Do steps 1 to 3 of the module docstring once, in one transaction."""
        result = DeadlineResult()
        # Pipelined: BEGIN rides with the closing, and so does the setting that has the pass's
        # statements run the plans the server keeps (see the module docstring).
        with self.db.transaction(pipelined=True) as store:
            store.execution.send_generic_plans()
            closed, audits = store.monitoring.close_overdue_and_take_audits(
                now, self.batch_size, OVERDUE_ERROR, now - self.lookback, self.batch_size)
            result.overdue_runs = [run_id for run_id, _ in closed]
            workflows = {workflow_id for _, workflow_id in closed}

            result.audited_schedules = len(audits)
            advances: list[tuple[int, datetime, datetime | None]] = []
            wanted: list[tuple[int, int, datetime]] = []
            # Schedules of one expression checked up to the same instant walk the same ticks: once a pass.
            walks: dict[tuple[str, str, datetime, timedelta], tuple[datetime, datetime | None, list[datetime]]] = {}
            for audit in audits:
                if audit.status != "active" or audit.archived:
                    advances.append((audit.schedule_id, audit.checked_until, None))  # re-armed on resume
                    continue
                key = (audit.cron, audit.timezone, audit.checked_until,
                       _grace(audit.kind, audit.cadence_seconds, audit.starting_deadline_seconds))
                try:
                    walked = walks.get(key)
                    if walked is None:
                        walked = walks[key] = self._walk(*key, now)
                    checked, next_check, ticks = walked
                except Exception as exc:  # one bad expression must not stop the others
                    log.error("tick audit of schedule %d failed: %s", audit.schedule_id,
                              sanitize_error(f"{type(exc).__name__}: {exc}"))
                    advances.append((audit.schedule_id, audit.checked_until, now + self.interval))
                    continue
                advances.append((audit.schedule_id, checked, next_check))
                # A tick that had its run when the audit was taken would only meet the
                # insert's ON CONFLICT: only the others can be missed.
                ran = set(audit.ran)
                wanted += [(audit.tenant_id, audit.workflow_id, tick) for tick in ticks if tick not in ran]
            created = store.monitoring.record_missed_and_advance(wanted, advances, NEVER_RAN_ERROR, now)
            result.missed_ticks = [(workflow_id, tick) for _, workflow_id, tick in created]
            workflows |= {workflow_id for _, workflow_id, _ in created}
            # Under a savepoint: a fault in the evaluation leaves the verdicts written.
            result.evaluation, redo = alerts.evaluate_batch(store, workflows, now)
        if redo:
            result.evaluation.merge(alerts.evaluate_each(self.db, redo, now))
        result.full = len(closed) >= self.batch_size or len(audits) >= self.batch_size
        return result

    def _walk(
        self, cron: str, timezone: str, checked_until: datetime, grace: timedelta, now: datetime
    ) -> tuple[datetime, datetime | None, list[datetime]]:
        """Return the new watermark, when to look again, and the ticks now past their grace."""
        schedule = _schedule(cron, timezone)
        start = max(checked_until, now - self.lookback)
        horizon = now - grace
        ticks: list[datetime] = []
        following = None
        for fire in schedule.fire_times(start):
            if fire > horizon or len(ticks) >= self.max_ticks:
                following = fire  # the first tick after the new watermark
                break
            ticks.append(fire)
        checked = ticks[-1] if len(ticks) >= self.max_ticks else max(start, horizon)
        if following is not None and following > checked + HORIZON:
            following = None  # as next_after: nothing within the horizon
        return checked, (following + grace if following else None), ticks

    def run_once(self, now: datetime) -> datetime:
        self.last = self.detect(now)
        metrics.current().runs_closed("missed", len(self.last.overdue_runs) + len(self.last.missed_ticks))
        if self.last.full:
            return now + timedelta(seconds=1)
        return now + self.interval
