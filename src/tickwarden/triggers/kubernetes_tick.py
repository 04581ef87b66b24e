"""A CronJob's pod: record the tick it was started for, then run its attempt as a worker would.

The tick is recorded with the built-in trigger's own insert (`create_tick_runs`,
`ON CONFLICT DO NOTHING` on (workflow, tick)), so a CronJob that fires twice, or a
tick the built-in trigger also fired during a switch of triggers, is one run. A tick
is recorded only when the database agrees it is one:

- the schedule exists, is active, and its workflow is not archived nor external
  (an external workflow has no CronJob; one left over records nothing);
- the tick is a fire time of the schedule's current cron expression in its zone,
  strictly after its last edit (`schedules.updated_at`): a CronJob still carrying an
  old expression, or a resumed CronJob catching up on ticks that passed while
  paused, records nothing, as the built-in trigger would;
- it is at most `starting_deadline_seconds` old (older ones belong to the deadline
  detector, which records them missed) and not in the future (beyond clock skew).

The run's queued attempt is leased in the same transaction and executed by
`Worker.execute`, the worker's own path (watchdog, environment, outcome, retry
budget). Retries the outcome poller queues later go to the worker pool, or, with
`TICKWARDEN_KUBERNETES_RETRIES=jobs`, to a Job each whose pod runs `run_attempt`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwarden.cadence import CronSchedule
from tickwarden.catalog import budget_for
from tickwarden.clock import Clock
from tickwarden.db import Database
from tickwarden.models import Attempt, FinishedAttempt
from tickwarden.store.ledger import TickRequest

# Pods may start a little before the tick on a clock that runs slightly ahead.
CLOCK_SKEW = timedelta(seconds=60)
ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class TickOutcome:
    """What a pod did: `recorded` (a new run), `duplicate` (the run existed), `leased` (a retry) or `refused`."""

    status: str
    reason: str
    run_id: int | None = None
    attempt: Attempt | None = None
    finished: FinishedAttempt | None = None


def record_tick(db: Database, schedule_id: int, tick: datetime, now: datetime, *, worker_id: str | None = None,
                lease_seconds: float = 30) -> TickOutcome:
    """Record `tick` of a schedule as a run; with `worker_id`, lease its queued attempt too."""
    with db.transaction() as store:
        context = store.kubernetes.tick_context(schedule_id)
        if context is None:
            return TickOutcome("refused", f"schedule {schedule_id} does not exist")
        if context.kind == "external":
            return TickOutcome("refused", f"schedule {schedule_id} is an external workflow's; its ticks come from "
                                          "check-ins")
        if context.archived or context.status != "active":
            return TickOutcome("refused", f"schedule {schedule_id} is {'archived' if context.archived else 'paused'}")
        schedule = CronSchedule(context.cron, context.timezone)
        if schedule.next_after(tick - ONE_MICROSECOND) != tick:
            return TickOutcome("refused", f"{_iso(tick)} is not a tick of schedule {schedule_id}'s cron expression")
        if tick <= context.updated_at:
            return TickOutcome("refused", f"{_iso(tick)} is not after the schedule's last change")
        if tick > now + CLOCK_SKEW:
            return TickOutcome("refused", f"{_iso(tick)} is in the future")
        if now - tick > timedelta(seconds=context.starting_deadline_seconds):
            return TickOutcome("refused", f"{_iso(tick)} is past its starting deadline; it is recorded missed")
        budget = budget_for(context.cadence_seconds, context.policy_overrides, context.monitoring_enabled,
                            context.timeout_seconds)
        created = store.ledger.create_tick_run(
            TickRequest(context.tenant_id, context.workflow_id, tick, budget.retries, budget.deadline(tick)), now)
        attempt = None
        # A pod holds no credentials to wake an environment that runs as a pod: its attempt
        # stays queued for the worker pool instead of failing a wake here.
        pooled = context.environment_runtime == "kubernetes"
        if worker_id is not None and not pooled:
            attempt = store.kubernetes.lease_tick_attempt(context.workflow_id, tick, worker_id, now, lease_seconds)
        waits = "; its attempt waits for the worker pool (its environment runs as a pod)" if pooled else ""
        if created is not None:
            return TickOutcome("recorded", f"recorded {_iso(tick)}{waits}", created.id, attempt)
        return TickOutcome("duplicate", f"{_iso(tick)} was already recorded", None, attempt)


def run_tick(db: Database, schedule_id: int, tick: datetime, clock: Clock, worker_id: str, *,
             lease_seconds: float = 30) -> TickOutcome:
    """Record the tick and execute its attempt on the worker's path, when this pod leased it."""
    from tickwarden.worker import Worker

    outcome = record_tick(db, schedule_id, tick, clock.now(), worker_id=worker_id, lease_seconds=lease_seconds)
    if outcome.attempt is None:
        return outcome
    worker = Worker(db, worker_id, lease_seconds=lease_seconds, clock=clock)
    try:
        finished = worker.execute(outcome.attempt)
    finally:
        worker.close(clock.now())
    return TickOutcome(outcome.status, outcome.reason, outcome.run_id, outcome.attempt, finished)


def run_attempt(db: Database, attempt_id: int, clock: Clock, worker_id: str, *,
                lease_seconds: float = 30) -> TickOutcome:
    """Lease one queued attempt (a retry's Job) and execute it on the worker's path."""
    from tickwarden.worker import Worker

    with db.transaction() as store:
        attempt = store.kubernetes.lease_attempt(attempt_id, worker_id, clock.now(), lease_seconds)
    if attempt is None:
        return TickOutcome("refused", f"attempt {attempt_id} is not queued (another worker took it, or it is done)")
    worker = Worker(db, worker_id, lease_seconds=lease_seconds, clock=clock)
    try:
        finished = worker.execute(attempt)
    finally:
        worker.close(clock.now())
    return TickOutcome("leased", f"ran attempt {attempt_id}", attempt.run_id, attempt, finished)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
