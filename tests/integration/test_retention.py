"""Retention on a virtual clock: what each class keeps, what it must never touch, replicas."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.helpers import lease, streak
from tests.integration.pipeline import DAILY, create_tick, workflow
from tickwarden import retention
from tickwarden.db import Database
from tickwarden.models import AttemptOutcome, Workflow
from tickwarden.poller import OutcomePoller
from tickwarden.retention import RetentionSpec, RetentionSweeper, set_tenant_retention

DAY = timedelta(days=1)
YEAR_START = datetime(2025, 1, 1, 2, 0, tzinfo=UTC)
# The "short" tenant keeps everything briefly; "keep" runs on the platform defaults.
SHORT = RetentionSpec(metadata_days=30, logs_days=3, payloads_days=1, outbox_days=7, alerts_days=30)


def run_tick(db: Database, wf: Workflow, day: datetime, ok: bool) -> None:
    """Create the tick's run and finish its one attempt with logs, error text and outputs."""
    run = create_tick(db, wf, day, day)
    done = day + timedelta(minutes=3)
    outcome = (AttemptOutcome(status="succeeded", log_tail="rows loaded", outputs={"rows": 3})
               if ok else AttemptOutcome(status="failed", error_category="step_error", error="load failed: boom",
                                         failed_step="load", retryable=False, log_tail="traceback tail",
                                         outputs={"partial": True}))
    with db.transaction() as store:
        leased = lease(store, "w1", day, 600, limit=1)
        assert [a.run_id for a in leased] == [run.id]
        store.ledger.finish_attempt(leased[0], "w1", outcome, done, steps=[
            {"step": "load", "position": 0, "status": "succeeded" if ok else "failed", "log": "step log line",
             "output": {"customer": "payload"}, "error": None if ok else "boom"}])


def fleet(db: Database, now: datetime) -> dict[str, Workflow]:
    wfs = {
        "keep/steady": workflow(db, now, tenant="keep", name="steady", cadence=DAILY),
        "keep/flaky": workflow(db, now, tenant="keep", name="flaky", cadence=DAILY),
        "short/flaky": workflow(db, now, tenant="short", name="flaky", cadence=DAILY),
        "short/broken": workflow(db, now, tenant="short", name="broken", cadence=DAILY),
    }
    with db.transaction() as store:
        short = store.catalog.get_tenant_by_name("short")
        set_tenant_retention(store, short.id, SHORT, now)
        for tenant_id in {wf.tenant_id for wf in wfs.values()}:
            store.outbox.upsert_notification_channel(tenant_id=tenant_id, name="ops", kind="recording",
                                              audience="customer", now=now)
    return wfs


def outcome_of(key: str, index: int, days: int) -> bool:
    if key.endswith("steady"):
        return True
    if key == "short/broken":  # succeeds for five days, then fails until the last day of the year
        return index < 5 or index == days - 1
    return index % 10 != 9  # flaky: one failure in ten, recovered the next day


def rows(db: Database, query: str, *params: object) -> list[tuple]:
    with db.transaction() as store:
        return store.conn.execute(query, params).fetchall()


def test_a_year_of_a_small_fleet_keeps_exactly_what_each_class_promises(db: Database) -> None:
    days = 365
    wfs = fleet(db, YEAR_START - DAY)
    poller = OutcomePoller(db, "p1")
    sweeper = RetentionSweeper(db)
    broken_alert_opened: datetime | None = None
    for index in range(days):
        day = YEAR_START + index * DAY
        if index == days - 1:
            # The last day: before the broken workflow's success, its alert is older than
            # every retention of its tenant, and intact.
            (alert_id, opened_at, count), = rows(
                db, "SELECT id, opened_at, failure_count FROM alerts WHERE workflow_id = %s AND status = 'open'",
                wfs["short/broken"].id)
            assert day - opened_at > timedelta(days=max(SHORT.days().values()))
            broken_alert_opened = opened_at
            assert count == days - 1 - 5
            with db.transaction() as store:
                assert streak(store, wfs["short/broken"].id) == days - 1 - 5
            events = rows(db, "SELECT kind FROM alert_events WHERE alert_id = %s ORDER BY id", alert_id)
            assert events[0] == ("opened",)
            kept = rows(db, "SELECT count(*), count(r.error), count(a.log_tail), count(s.output) FROM runs r "
                              "JOIN attempts a ON a.run_id = r.id JOIN attempt_steps s ON s.attempt_id = a.id "
                              "WHERE r.workflow_id = %s AND r.status = 'failed'", wfs["short/broken"].id)
            assert kept == [(days - 1 - 5,) * 4], "the runs of the open alert keep logs and payloads"
        for key, wf in wfs.items():
            run_tick(db, wf, day, outcome_of(key, index, days))
        poller.run_once(day + timedelta(minutes=5))
        # Deliveries go out as soon as they are written (the notifier is not under test here).
        rows(db, "UPDATE notification_outbox SET status = 'sent', sent_at = created_at WHERE status = 'pending' "
                 "RETURNING id")
        sweeper.run_once(day + timedelta(hours=1))
    now = YEAR_START + (days - 1) * DAY + timedelta(hours=1)
    sweeper.run_once(now)

    # The open alert resolved on the next success, with its whole history.
    (status, resolved_at, opened_at), = rows(
        db, "SELECT status, resolved_at, opened_at FROM alerts WHERE workflow_id = %s ORDER BY id DESC LIMIT 1",
        wfs["short/broken"].id)
    assert status == "resolved" and opened_at == broken_alert_opened
    assert resolved_at > now - DAY

    horizons = {"keep": retention.DEFAULT_DAYS, "short": retention.effective_days(
        _policy(db, "short"))}
    for key, wf in wfs.items():
        keep = horizons[key.split("/")[0]]
        ticks = rows(db, "SELECT r.scheduled_for, r.status, r.error, a.log_tail, a.error, a.outputs, s.log, "
                         "s.output, s.error FROM runs r JOIN attempts a ON a.run_id = r.id "
                         "JOIN attempt_steps s ON s.attempt_id = a.id WHERE r.workflow_id = %s "
                         "ORDER BY r.scheduled_for", wf.id)
        newest_success = max(t[0] for t in ticks if t[1] == "succeeded")
        expected_ticks = [YEAR_START + i * DAY for i in range(days)
                          if YEAR_START + i * DAY >= min(now - keep["metadata"] * DAY, newest_success)]
        assert [t[0] for t in ticks] == expected_ticks, f"{key}: metadata kept exactly for its horizon"
        for (at, status, run_error, log_tail, attempt_error, outputs, step_log, step_output, step_error) in ticks:
            protected = at >= newest_success
            logs_live = protected or at >= now - keep["logs"] * DAY
            payloads_live = protected or at >= now - keep["payloads"] * DAY
            assert (log_tail is not None) == logs_live, (key, at, "log tail")
            assert (step_log != "") == logs_live, (key, at, "step log")
            if status == "failed":
                assert (run_error is not None) == logs_live == (attempt_error is not None) == \
                    (step_error is not None), (key, at, "error text")
            assert (outputs != {}) == payloads_live, (key, at, "attempt outputs")
            assert (step_output is not None) == payloads_live, (key, at, "step output")

    for tenant, keep in horizons.items():
        alerts = rows(db, "SELECT a.status, a.resolved_at, (SELECT count(*) FROM alert_events e "
                          "WHERE e.alert_id = a.id) FROM alerts a JOIN tenants t ON t.id = a.tenant_id "
                          "WHERE t.name = %s", tenant)
        assert alerts, tenant
        for status, resolved_at, events in alerts:
            assert status == "open" or resolved_at >= now - keep["alerts"] * DAY, (tenant, resolved_at)
            assert events >= 2
        deliveries = rows(db, "SELECT o.sent_at, a.status FROM notification_outbox o JOIN tenants t "
                              "ON t.id = o.tenant_id JOIN alerts a ON a.id = o.alert_id WHERE t.name = %s", tenant)
        assert deliveries, tenant
        for sent_at, alert_status in deliveries:
            assert alert_status == "open" or sent_at >= now - keep["outbox"] * DAY, (tenant, sent_at)
    # The short tenant's flaky workflow had resolved alerts within 30 days and outside 7: some deliveries went.
    assert _count(db, "SELECT count(*) FROM alerts a JOIN tenants t ON t.id = a.tenant_id WHERE t.name = 'short' "
                      "AND a.resolved_at < %s", now - SHORT.outbox_days * DAY) > 0
    totals = _totals(db)
    assert set(totals) == set(retention.CLASSES) and all(totals.values()), totals


def _policy(db: Database, tenant: str):
    with db.transaction() as store:
        return store.retention.get_policy(store.catalog.get_tenant_by_name(tenant).id)


def _count(db: Database, query: str, *params: object) -> int:
    return rows(db, query, *params)[0][0]


def _totals(db: Database) -> dict[str, int]:
    with db.transaction() as store:
        return store.retention.totals()


def test_an_idle_sweep_expires_nothing_and_sleeps_its_interval(db: Database, start: datetime) -> None:
    wf = workflow(db, start, tenant="acme", name="nightly", cadence=DAILY)
    run_tick(db, wf, start, True)
    sweeper = RetentionSweeper(db)
    assert sweeper.run_once(start + DAY) == start + DAY + retention.INTERVAL
    assert _totals(db) == {}


def test_a_backlog_is_expired_in_bounded_batches_and_the_loop_comes_back_at_once(db: Database) -> None:
    wf = workflow(db, YEAR_START, tenant="acme", name="nightly", cadence=DAILY)
    for index in range(12):
        run_tick(db, wf, YEAR_START + index * DAY, True)
    sweeper = RetentionSweeper(db, workflows_per_batch=1, runs_per_workflow=2, max_batches=2)
    later = YEAR_START + 500 * DAY
    first = sweeper.sweep(later)
    # Two batches of two runs (an attempt and a step each); the second batch starts at the
    # mark, the first batch's last run, already cleared: three runs in all.
    assert first.more and first.expired["payloads"] == 3 * 2
    wake = sweeper.run_once(later)
    assert wake == later
    for _ in range(10):
        sweeper.run_once(later)
    remaining = rows(db, "SELECT scheduled_for FROM runs WHERE workflow_id = %s", wf.id)
    assert remaining == [(YEAR_START + 11 * DAY,)], "everything but the newest success went"


def test_two_sweepers_at_once_expire_each_row_once(db: Database) -> None:
    wfs = [workflow(db, YEAR_START, tenant=f"t{i % 3}", name=f"w{i}", cadence=DAILY) for i in range(8)]
    for index in range(40):
        for wf in wfs:
            run_tick(db, wf, YEAR_START + index * DAY, True)
    later = YEAR_START + 600 * DAY
    sweepers = [RetentionSweeper(db, workflows_per_batch=2, runs_per_workflow=5) for _ in range(2)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    passes: list[dict[str, int]] = []

    def sweep(sweeper: RetentionSweeper) -> None:
        try:
            barrier.wait()
            for _ in range(30):
                result = sweeper.sweep(later)
                passes.append(result.expired)
                if not result.more:
                    break
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=sweep, args=(s,)) for s in sweepers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    # Each workflow keeps only its newest success; every other run went exactly once.
    assert _count(db, "SELECT count(*) FROM runs") == len(wfs)
    expired_runs_and_attempts = sum(p["metadata"] for p in passes)
    assert expired_runs_and_attempts == 2 * 39 * len(wfs)
    assert _totals(db)["metadata"] == expired_runs_and_attempts


def test_retention_overrides_refuse_values_below_the_floor() -> None:
    with pytest.raises(ValueError):
        RetentionSpec(metadata_days=1)
    with pytest.raises(ValueError):
        RetentionSpec(logs_days=0)
    with pytest.raises(ValueError):
        RetentionSpec.model_validate({"logs": 3})


def test_the_database_refuses_a_retention_below_the_floor_too(db: Database, start: datetime) -> None:
    wf = workflow(db, start)
    with pytest.raises(psycopg.errors.CheckViolation), db.transaction() as store:
        store.retention.set_policy(wf.tenant_id, {"metadata": 1}, start)


def test_metrics_count_the_rows_expired_per_class(db: Database, clock) -> None:
    from tickwarden.metrics import registry_for, render

    wf = workflow(db, YEAR_START, tenant="acme", name="nightly", cadence=DAILY)
    for index in range(3):
        run_tick(db, wf, YEAR_START + index * DAY, True)
    text = render(registry_for(db, clock)).decode()
    assert 'tickwarden_retention_expired_rows_total{class="metadata"} 0.0' in text
    # After 100 days, the two older runs (the newest success stays whole) lose the
    # payload and the log of their attempt and step; after 500, the runs and attempts go.
    RetentionSweeper(db).sweep(YEAR_START + 100 * DAY)
    RetentionSweeper(db).sweep(YEAR_START + 500 * DAY)
    text = render(registry_for(db, clock)).decode()
    assert 'tickwarden_retention_expired_rows_total{class="payloads"} 4.0' in text
    assert 'tickwarden_retention_expired_rows_total{class="logs"} 4.0' in text
    assert 'tickwarden_retention_expired_rows_total{class="metadata"} 4.0' in text
    assert 'tickwarden_retention_expired_rows_total{class="alerts"} 0.0' in text


def test_the_service_runs_the_retention_sweeper(db: Database) -> None:
    from tickwarden.service import build_loops

    (sweeper,) = [loop for loop in build_loops(db, "r1") if loop.name == "retention"]
    assert isinstance(sweeper, RetentionSweeper)
