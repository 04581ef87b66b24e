"""The poller's and the deadline detector's passes run the plans the server keeps for their
statements, not plans made afresh; and so does the evaluation of a pass's workflows one by one
after its batch evaluation faulted (`alerts.evaluate_each`).

Under the server's default (`plan_cache_mode` auto) a prepared statement is planned afresh at
its first five executions, and after them whenever its fresh plans look cheaper than the kept
one: on a ledger of 16 months the evaluation's inputs and the retry engine's statement were
planned at every pass (2-3.5 ms of planning against well under 1 ms of running). The pass's
transaction runs generic plans (`execution_generic_plans`, behind its BEGIN), so a statement
prepared on the poller's connection has no fresh plan at all: its counters in
pg_prepared_statements say so. The deadline detector's closing of overdue runs was planned
afresh at every pass the same way. That the setting costs a pass no wait of its own is
test_poller_pipeline.py's and test_deadline_audits.py's (their passes' waits are counted).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.dbutil import TEST_URL
from tests.integration.pipeline import FIVE_MIN, attempt_once, create_tick, fail, workflow
from tickwarden import alerts
from tickwarden.db import Database
from tickwarden.deadlines import DeadlineDetector
from tickwarden.poller import OutcomePoller

PASSES = 8  # psycopg prepares a statement at its fifth execution: passes 5 to 8 run prepared statements
# The statements of every pass below, by the start of their text as prepared.
EVALUATION_INPUTS = "SELECT w.id AS workflow_id"
CLAIM = "WITH next AS"
RETRY_ENGINE = "WITH moved AS"  # ledger_queue_retries (the claim's own launch is inside its text)
CLOSING = "WITH overdue AS"  # monitoring_lock_overdue_and_arm


def verdicts_and_engine_retries(db, clock, start: datetime) -> None:
    """`PASSES` pairs of failed attempts waiting for the poller, in the order they finished: a
    verdict (evaluated by the pass) and a failure with retries left (for the retry engine: the
    passes below run in mid-December, past the claim's own launch months for a November tick)."""
    verdict_wf = workflow(db, clock.now(), cadence=FIVE_MIN, policy={"alert_after": 100})
    retry_wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="other", policy={"alert_after": 100, "retries": 2})
    for n in range(PASSES):
        tick = start + timedelta(minutes=5 * n)
        verdict = create_tick(db, verdict_wf, tick, clock.now())
        attempt_once(db, verdict, fail(retryable=False), clock.advance(1))
        retried = create_tick(db, retry_wf, tick, clock.now())
        attempt_once(db, retried, fail(), clock.advance(1))


def plans_of(pool: Database, starts: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """(generic plans, fresh plans) of each prepared statement of the pool's one connection, by its text's start."""
    with pool.connection() as conn:
        rows = conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").fetchall()
    found: dict[str, tuple[int, int]] = {}
    for statement, generic, custom in rows:
        for start in starts:
            if statement.lstrip().startswith(start):
                assert start not in found, statement  # one text of each: one month, one batch size
                found[start] = (generic, custom)
    return found


def assert_kept_plans_only(plans: dict[str, tuple[int, int]], starts: set[str]) -> None:
    """Each of these statements was prepared, and ran the plan the server keeps at every prepared execution."""
    assert set(plans) == starts, plans
    for start_of, (generic, custom) in plans.items():
        assert custom == 0 and generic >= 1, (start_of, generic, custom)


def test_the_statements_of_the_poller_pass_run_the_plans_the_server_keeps(db, clock, start) -> None:
    """The claim, the evaluation's inputs and the retry engine's statement, prepared on the
    poller's connection, never get a fresh plan (auto would give each one at its first five
    prepared executions, and the evaluation's inputs one at every pass on a big ledger)."""
    verdicts_and_engine_retries(db, clock, start)
    at = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)
    with Database(TEST_URL, schema=db.schema, min_size=1, max_size=1) as pool:
        poller = OutcomePoller(pool, "p1", batch_size=2)
        for n in range(PASSES):
            result = poller.poll(at + timedelta(seconds=n))
            assert result.claimed == 2 and len(result.retried) == 1, result
            assert result.evaluation.evaluated == 1, result
        plans = plans_of(pool, (EVALUATION_INPUTS, CLAIM, RETRY_ENGINE))
        with pool.connection() as conn:  # the setting is the pass's transaction's alone
            assert conn.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"
    assert_kept_plans_only(plans, {EVALUATION_INPUTS, CLAIM, RETRY_ENGINE})


def test_the_closing_of_overdue_runs_runs_the_plan_the_server_keeps(db, clock, start) -> None:
    """The deadline pass's closing of overdue runs and the evaluation's inputs, prepared on the
    detector's connection, never get a fresh plan."""
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, policy={"alert_after": 100})
    for n in range(PASSES):
        create_tick(db, wf, start + timedelta(minutes=5 * n), clock.now())
    at = start + timedelta(hours=3)  # every run past its deadline
    with Database(TEST_URL, schema=db.schema, min_size=1, max_size=1) as pool:
        detector = DeadlineDetector(pool, batch_size=1)
        for n in range(PASSES):
            result = detector.detect(at + timedelta(seconds=n))
            assert len(result.overdue_runs) == 1 and result.evaluation.evaluated == 1, result
        plans = plans_of(pool, (CLOSING, EVALUATION_INPUTS))
        with pool.connection() as conn:  # the setting is the pass's transaction's alone
            assert conn.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"
    assert_kept_plans_only(plans, {CLOSING, EVALUATION_INPUTS})


def test_the_evaluation_one_workflow_at_a_time_runs_the_plans_the_server_keeps(db, clock, start) -> None:
    """After a pass's batch evaluation faulted, its workflows are evaluated one by one, each in a
    transaction of its own (`alerts.evaluate_each`): each runs the plans the server keeps, as the
    pass did, so the evaluation's inputs, prepared on the connection, never get a fresh plan."""
    wfs = [workflow(db, clock.now(), cadence=FIVE_MIN, name=f"one-{n}", policy={"alert_after": 1})
           for n in range(PASSES)]
    for wf in wfs:
        attempt_once(db, create_tick(db, wf, start, clock.now()), fail(retryable=False), clock.advance(1))
    with Database(TEST_URL, schema=db.schema, min_size=1, max_size=1) as pool:
        report = alerts.evaluate_each(pool, [wf.id for wf in wfs], clock.advance(5))
        assert report.evaluated == PASSES and len(report.opened) == PASSES and report.failed_workflows == [], report
        plans = plans_of(pool, (EVALUATION_INPUTS,))
        with pool.connection() as conn:  # the setting is each transaction's alone
            assert conn.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"
    assert_kept_plans_only(plans, {EVALUATION_INPUTS})
