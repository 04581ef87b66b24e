from datetime import timedelta

import psycopg
import pytest

from tests import helpers
from tests.helpers import create_run, lease, make_workflow, streak, tick
from tickwarden.models import AttemptOutcome
from tickwarden.store.ledger import FREE_LOST_REQUEUES

FAIL = AttemptOutcome(status="failed", error_category="step_error", error="boom", failed_step="join")
OK = AttemptOutcome(status="succeeded")


def lease_one(db, now, worker="w1", lease=60):
    with db.transaction() as store:
        leased = helpers.lease(store, worker, now, lease)
    assert len(leased) == 1
    return leased[0]


def attempt_of(store, attempt):
    return next(a for a in store.ledger.list_attempts(attempt.run_id) if a.id == attempt.id)


def finish(db, attempt, outcome, now, worker="w1"):
    with db.transaction() as store:
        return store.ledger.finish_attempt(attempt, worker, outcome, now)


def test_a_tick_creates_one_run_with_a_queued_first_attempt(db, clock):
    workflow = make_workflow(db, clock.now())
    run = create_run(db, workflow, clock.now(), clock.now())
    with db.transaction() as store:
        attempts = store.ledger.list_attempts(run.id)
    assert run.status == "queued" and run.attempts_count == 1 and not run.manual
    assert [(a.number, a.status) for a in attempts] == [(1, "queued")]


def test_creating_the_same_tick_twice_yields_one_run(db, clock):
    workflow = make_workflow(db, clock.now())
    with db.transaction() as store:
        first = store.ledger.create_tick_runs([tick(workflow, clock.now()), tick(workflow, clock.now())], clock.now())
    with db.transaction() as store:
        again = store.ledger.create_tick_run(tick(workflow, clock.now()), clock.now())
        runs = store.ledger.list_runs(workflow.id)
    assert len(first) == 1 and again is None and len(runs) == 1


def test_manual_runs_do_not_collide_with_ticks(db, clock):
    workflow = make_workflow(db, clock.now())
    create_run(db, workflow, clock.now(), clock.now())
    with db.transaction() as store:
        manual = store.ledger.create_manual_run(tenant_id=workflow.tenant_id, workflow_id=workflow.id, retry_budget=0,
                                         deadline_at=clock.now() + timedelta(hours=1), now=clock.now(),
                                         requested_by="ops@acme.test")
        runs = store.ledger.list_runs(workflow.id)
    assert manual.manual and len(runs) == 2


def test_success_on_the_first_attempt_is_the_verdict(db, clock):
    workflow = make_workflow(db, clock.now())
    run = create_run(db, workflow, clock.now(), clock.now())
    attempt = lease_one(db, clock.now())
    result = finish(db, attempt, OK, clock.advance(30))
    with db.transaction() as store:
        run = store.ledger.get_run(run.id)
    assert result.applied and result.run_status == "succeeded"
    assert run.status == "succeeded" and not run.recovered and run.finished_at == clock.now()


def test_failure_with_budget_left_is_pending_retry_and_then_recovered(db, clock):
    workflow = make_workflow(db, clock.now())
    run = create_run(db, workflow, clock.now(), clock.now(), budget=2)
    first = lease_one(db, clock.now())
    assert finish(db, first, FAIL, clock.advance(10)).run_status == "pending_retry"
    with db.transaction() as store:
        assert store.ledger.get_run(run.id).status == "pending_retry"
        retry = store.ledger.queue_retries([(run.id, run.scheduled_for)], clock.now())
        assert store.ledger.queue_retries([(run.id, run.scheduled_for)], clock.now()) == []  # a second engine finds nothing to do
    assert [a.number for a in retry] == [2]
    second = lease_one(db, clock.advance(1))
    assert second.id == retry[0].id
    assert finish(db, second, OK, clock.advance(10)).run_status == "succeeded"
    with db.transaction() as store:
        run = store.ledger.get_run(run.id)
        attempts = store.ledger.list_attempts(run.id)
    assert run.status == "succeeded" and run.recovered and run.error is None and run.attempts_count == 2
    assert [a.status for a in attempts] == ["failed", "succeeded"]


def test_failure_without_budget_is_failed_with_the_final_error(db, clock):
    workflow = make_workflow(db, clock.now())
    run = create_run(db, workflow, clock.now(), clock.now(), budget=0)
    attempt = lease_one(db, clock.now())
    assert finish(db, attempt, FAIL, clock.advance(5)).run_status == "failed"
    with db.transaction() as store:
        run = store.ledger.get_run(run.id)
    assert (run.status, run.error, run.error_category, run.failed_step) == ("failed", "boom", "step_error", "join")


def test_a_non_retryable_failure_skips_the_budget(db, clock):
    workflow = make_workflow(db, clock.now())
    create_run(db, workflow, clock.now(), clock.now(), budget=3)
    attempt = lease_one(db, clock.now())
    outcome = AttemptOutcome(status="failed", error_category="auth", error="publisher deactivated", retryable=False)
    assert finish(db, attempt, outcome, clock.advance(1)).run_status == "failed"


def test_a_result_delivered_twice_is_applied_once(db, clock):
    workflow = make_workflow(db, clock.now())
    create_run(db, workflow, clock.now(), clock.now(), budget=2)
    attempt = lease_one(db, clock.now())
    assert finish(db, attempt, FAIL, clock.advance(1)).applied
    assert not finish(db, attempt, OK, clock.advance(1)).applied
    with db.transaction() as store:
        assert attempt_of(store, attempt).status == "failed"


def test_only_the_lease_holder_can_finish_or_renew(db, clock):
    workflow = make_workflow(db, clock.now())
    create_run(db, workflow, clock.now(), clock.now())
    attempt = lease_one(db, clock.now(), worker="w1")
    with db.transaction() as store:
        assert not store.ledger.renew_lease(attempt, "w2", clock.now(), 60)
        assert store.ledger.renew_lease(attempt, "w1", clock.now(), 60)
    assert not finish(db, attempt, OK, clock.advance(1), worker="w2").applied


def test_an_expired_lease_is_lost_and_takes_the_failure_path(db, clock):
    workflow = make_workflow(db, clock.now())
    run = create_run(db, workflow, clock.now(), clock.now(), budget=1)
    attempt = lease_one(db, clock.now(), lease=30)
    with db.transaction() as store:
        assert store.ledger.expire_leases(clock.advance(29)) == []
        reaped = store.ledger.expire_leases(clock.advance(2))
    assert [(r.attempt_id, r.run_status) for r in reaped] == [(attempt.id, "pending_retry")]
    # the worker comes back from the dead: its result is not applied
    assert not finish(db, attempt, OK, clock.advance(1)).applied
    with db.transaction() as store:
        assert attempt_of(store, attempt).status == "lost"
    # Losses are re-queued for free a bounded number of times, then spend the budget (1), then fail.
    for number in range(2, FREE_LOST_REQUEUES + 3):
        with db.transaction() as store:
            store.ledger.queue_retries([(run.id, run.scheduled_for)], clock.now())
        again = lease_one(db, clock.now(), lease=30)
        with db.transaction() as store:
            reaped = store.ledger.expire_leases(clock.advance(60))
            run = store.ledger.get_run(run.id)
        assert again.number == number and reaped[0].attempt_id == again.id
    assert run.status == "failed" and run.error_category == "lost"


def test_a_deadline_pass_writes_missed_once_and_cancels_queued_attempts(db, clock):
    workflow = make_workflow(db, clock.now())
    run = create_run(db, workflow, clock.now(), clock.now())  # deadline: three hours after its tick
    past = clock.advance(3 * 3600)
    with db.transaction() as store:
        missed = store.monitoring.close_overdue_and_arm(past, 500, "no outcome", past)
        again = store.monitoring.close_overdue_and_arm(past, 500, "no outcome", past)
        attempts = store.ledger.list_attempts(run.id)
        leased = lease(store, "w1", past, 60)
        closed = store.ledger.get_run(run.id)
    assert missed == [(run.id, workflow.id)] and again == [] and leased == []
    assert closed.status == "missed" and closed.error_category == "missed"
    assert attempts[0].status == "cancelled"
    with db.connection() as conn:  # no verdict of the workflow's: nothing for the poller
        assert conn.execute("SELECT count(*) FROM outcome_queue").fetchone() == (0,)


def test_consecutive_failures_stop_at_the_newest_success(db, clock):
    workflow = make_workflow(db, clock.now(), cron="*/5 * * * *", cadence_seconds=300)
    base = clock.now()
    # oldest first: S F S F F F (+ one still running, which is not confirmed)
    pattern = ["succeeded", "failed", "succeeded", "failed", "failed", "failed", None]
    for index, verdict in enumerate(pattern):
        create_run(db, workflow, base + timedelta(minutes=5 * index), clock.now(), budget=0)
        attempt = lease_one(db, clock.now())
        if verdict:
            finish(db, attempt, OK if verdict == "succeeded" else FAIL, clock.advance(1))
    with db.transaction() as store:
        assert streak(store, workflow.id) == 3


def test_missed_runs_count_as_failures(db, clock):
    workflow = make_workflow(db, clock.now())
    create_run(db, workflow, clock.now(), clock.now())
    past = clock.advance(3 * 3600)
    with db.transaction() as store:
        store.monitoring.close_overdue_and_arm(past, 500, "no outcome", past)
        assert streak(store, workflow.id) == 1


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE runs SET status = 'exploded'",
        "UPDATE runs SET recovered = true",  # only a success can be recovered
        "UPDATE attempts SET status = 'running'",  # running needs a lease
        "UPDATE runs SET status = 'succeeded'",  # a verdict needs finished_at
    ],
)
def test_the_database_rejects_impossible_states(db, clock, statement):
    workflow = make_workflow(db, clock.now())
    create_run(db, workflow, clock.now(), clock.now())
    with pytest.raises(psycopg.errors.CheckViolation):
        with db.transaction() as store:
            store.conn.execute(statement)


def test_the_consecutive_failure_count_walks_only_the_streak_through_the_indexes(db, clock):
    workflow = make_workflow(db, clock.now(), cron="* * * * *", cadence_seconds=60)
    with db.transaction() as store:
        # a long history of the same workflow (every third run failed), then a success and a streak of 5
        store.conn.execute(
            """
            INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,
                              deadline_at, created_at, finished_at)
            SELECT %(t)s, %(w)s, %(t0)s + g * interval '1 minute',
                   CASE WHEN g = 60000 THEN 'succeeded' WHEN g %% 3 = 0 THEN 'failed' ELSE 'succeeded' END,
                   0, 1, %(t0)s, %(t0)s, %(t0)s
              FROM generate_series(1, 60000) g
            UNION ALL
            SELECT %(t)s, %(w)s, %(t0)s + (60000 + g) * interval '1 minute', 'failed', 0, 1, %(t0)s, %(t0)s, %(t0)s
              FROM generate_series(1, 5) g
            """,
            {"t": workflow.tenant_id, "w": workflow.id, "t0": clock.now()},
        )
        store.conn.execute("ANALYZE runs")
    with db.transaction() as store:
        assert streak(store, workflow.id) == 5
        from tickwarden.store.queries import queries

        plan = "\n".join(row[0] for row in store.conn.execute(
            "EXPLAIN " + queries()["monitoring_evaluation_inputs"],
            {"workflow_ids": [workflow.id], "rate_cadences": [], "rate_overrides": [], "rate_windows": [],
             "rate_alert_afters": [], "unscheduled": 86400, "now": clock.now()}))
        # The ledger is partitioned: a plan names each partition's copy of the parent index.
        copies = dict(store.conn.execute(
            "SELECT parent.relname, array_agg(child.relname::text) FROM pg_inherits i"
            "  JOIN pg_class parent ON parent.oid = i.inhparent JOIN pg_class child ON child.oid = i.inhrelid"
            " WHERE parent.relname = 'runs_workflow_recent_idx'"
            "   AND parent.relnamespace = to_regnamespace(current_schema()) GROUP BY parent.relname").fetchall())
    # the evaluation's own statement: the newest success is workflow_successes' row (no probe of
    # every month's runs; they keep no success index since migration 0040), then only the
    # streak, through the recent-runs index
    assert "workflow_successes" in plan
    assert any(name in plan for name in copies["runs_workflow_recent_idx"])
    assert "Seq Scan on runs" not in plan


def test_a_batch_of_outcomes_is_recorded_in_one_statement_each_attempt_once(db, clock):
    workflow = make_workflow(db, clock.now())
    runs = [create_run(db, workflow, clock.now() - timedelta(days=i), clock.now(), budget=1) for i in range(3)]
    with db.transaction() as store:
        leased = sorted(lease(store, "w1", clock.now(), 60, limit=10), key=lambda a: a.run_id)
    by_run = {a.run_id: a for a in leased}
    ok, failed, foreign = (by_run[r.id] for r in runs)
    with db.transaction() as store:  # another worker's attempt is not ours to finish
        store.conn.execute("UPDATE attempts SET worker_id = 'w2' WHERE id = %s", (foreign.id,))
    t1, t2 = clock.now() + timedelta(seconds=10), clock.now() + timedelta(seconds=20)
    with db.transaction() as store:
        results = store.ledger.finish_attempts("w1", [(ok, OK, t1), (failed, FAIL, t2), (foreign, OK, t2)])
        again = store.ledger.finish_attempts("w1", [(ok, FAIL, t2)])
    assert [(r.attempt_id, r.applied, r.run_status) for r in results] == [
        (ok.id, True, "succeeded"), (failed.id, True, "pending_retry"), (foreign.id, False, None)]
    assert [r.applied for r in again] == [False]
    with db.transaction() as store:
        done = {r.id: store.ledger.get_run(r.id) for r in runs}
        attempts = {a.id: attempt_of(store, a) for a in leased}
    assert (done[runs[0].id].status, done[runs[0].id].finished_at) == ("succeeded", t1)
    assert (done[runs[1].id].status, done[runs[1].id].finished_at) == ("pending_retry", None)
    assert done[runs[2].id].status == "running" and attempts[foreign.id].status == "running"
    assert (attempts[failed.id].finished_at, attempts[failed.id].error_category) == (t2, "step_error")
    with db.transaction() as store:
        assert store.ledger.finish_attempts("w1", []) == []


def test_a_lease_carries_each_attempts_tick_in_queue_order(db, clock):
    workflow = make_workflow(db, clock.now())
    ticks = [clock.now() + timedelta(hours=h) for h in (3, 1, 2)]
    for at in ticks:
        create_run(db, workflow, at, clock.now())
    later = clock.now() + timedelta(seconds=1)
    with db.transaction() as store:
        leased = store.ledger.lease_attempts_with_ticks("w1", later, 60, limit=10)
        runs = {run.id: run.scheduled_for for run in store.ledger.list_runs(workflow.id)}
    assert [scheduled_for for _, scheduled_for in leased] == ticks  # queued in creation order
    assert all(runs[attempt.run_id] == scheduled_for for attempt, scheduled_for in leased)
    assert {attempt.status for attempt, _ in leased} == {"running"}


def test_an_outcomes_step_rows_are_written_once_and_never_by_a_worker_that_lost_the_lease(db, clock):
    workflow = make_workflow(db, clock.now())
    runs = [create_run(db, workflow, clock.now() - timedelta(minutes=i), clock.now()) for i in (2, 1)]
    step = {"step": "load", "position": 0, "status": "succeeded", "log": "loaded", "output": None, "error": None}
    mine = lease_one(db, clock.now())
    theirs = lease_one(db, clock.now(), worker="w2")
    with db.transaction() as store:
        assert store.ledger.finish_attempt(mine, "w1", OK, clock.now(), steps=[step]).applied
        assert not store.ledger.finish_attempt(mine, "w1", OK, clock.now(), steps=[step]).applied
        assert not store.ledger.finish_attempt(theirs, "w1", OK, clock.now(), steps=[step]).applied
        written = store.conn.execute(
            "SELECT a.run_id, s.step, s.log FROM attempt_steps s JOIN attempts a ON a.id = s.attempt_id").fetchall()
    assert {mine.run_id, theirs.run_id} == {r.id for r in runs}
    assert [tuple(row) for row in written] == [(mine.run_id, "load", "loaded")]
