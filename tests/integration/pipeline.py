"""Builders for monitoring tests: workflows with a profile, ticks driven through the real pipeline."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.helpers import lease, publish
from tickwarden.db import Database
from tickwarden.alerts import profile_of
from tickwarden.models import AttemptOutcome, Run, Workflow
from tickwarden.poller import OutcomePoller
from tickwarden.profile import run_deadline
from tickwarden.store import TickRequest

FIVE_MIN = 300
HOURLY = 3600
DAILY = 86400


def fail(category: str = "step_error", error: str = "boom", *, retryable: bool | None = None) -> AttemptOutcome:
    from tickwarden.categories import is_retryable

    return AttemptOutcome(
        status="failed",
        error_category=category,
        error=error,
        failed_step="load",
        retryable=is_retryable(category) if retryable is None else retryable,
    )


OK = AttemptOutcome(status="succeeded")


def workflow(db: Database, now: datetime, *, tenant: str = "acme", name: str = "nightly", cadence: int = DAILY,
             cron: str | None = None, shadow: bool = False, tenant_shadow: bool = False,
             monitoring: bool = True, policy: dict | None = None) -> Workflow:
    cron = cron or {FIVE_MIN: "*/5 * * * *", HOURLY: "0 * * * *", DAILY: "0 2 * * *"}[cadence]
    with db.transaction() as store:
        t = store.catalog.upsert_tenant(tenant, now, shadow=tenant_shadow)
        return publish(store, t.id, name, now, shadow=shadow, monitoring_enabled=monitoring,
                       policy_overrides=policy or {}, cron=cron, cadence_seconds=cadence)


def budget_of(db: Database, wf: Workflow) -> tuple[int, int]:
    with db.transaction() as store:
        schedule = store.catalog.get_schedule_for_workflow(wf.id)
    cadence = schedule.cadence_seconds if schedule else DAILY
    return profile_of(cadence, wf.policy_overrides).retries, cadence


def create_tick(db: Database, wf: Workflow, scheduled_for: datetime, now: datetime) -> Run:
    retries, cadence = budget_of(db, wf)
    deadline = run_deadline(scheduled_for, timeout_seconds=600, backoffs=(0,) * retries, interval_seconds=cadence)
    with db.transaction() as store:
        run = store.ledger.create_tick_run(TickRequest(wf.tenant_id, wf.id, scheduled_for, retries, deadline), now)
    assert run is not None
    return run


def manual_run(db: Database, wf: Workflow, now: datetime) -> Run:
    with db.transaction() as store:
        return store.ledger.create_manual_run(tenant_id=wf.tenant_id, workflow_id=wf.id, retry_budget=0,
                                       deadline_at=now + timedelta(hours=1), now=now, requested_by="ops")


def attempt_once(db: Database, run: Run, outcome: AttemptOutcome, now: datetime, worker: str = "w1") -> None:
    """Lease the run's queued attempt and finish it with `outcome`."""
    with db.transaction() as store:
        leased = lease(store, worker, now, 600, limit=1)
        assert [a.run_id for a in leased] == [run.id], f"expected the queued attempt of run {run.id}"
        store.ledger.finish_attempt(leased[0], worker, outcome, now)


def drive(db: Database, poller: OutcomePoller, run: Run, outcomes: list[AttemptOutcome], clock) -> Run:
    """Run attempts of `run` with these outcomes in turn, polling after each, as the service would."""
    for outcome in outcomes:
        attempt_once(db, run, outcome, clock.advance(60))
        poller.run_once(clock.advance(5))
    with db.transaction() as store:
        return store.ledger.get_run(run.id)


def tick(db: Database, poller: OutcomePoller, wf: Workflow, scheduled_for: datetime,
         outcomes: list[AttemptOutcome], clock) -> Run:
    if clock.now() < scheduled_for:
        clock.set(scheduled_for)
    run = create_tick(db, wf, scheduled_for, clock.now())
    return drive(db, poller, run, outcomes, clock)


def alerts_of(db: Database, wf: Workflow):
    with db.transaction() as store:
        return [v.alert for v in store.monitoring.list_alerts() if v.alert.workflow_id == wf.id]


def events_of(db: Database, alert_id: int):
    with db.transaction() as store:
        return store.monitoring.list_alert_events(alert_id)
