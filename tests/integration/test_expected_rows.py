"""Expected results through the real worker: reported rows, and a zero-row success of a feed that expects rows."""

import pytest

from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tickwarden.categories import owner_for
from tickwarden.worker import Worker


@pytest.fixture
def worker(db, clock):
    made = Worker(db, "w1", clock=clock, secret_key=SECRET)
    yield made
    made.environments.close(clock.now())


def ran(db, run_id):
    with db.transaction() as store:
        return store.ledger.get_run(run_id), store.ledger.list_attempts(run_id)[-1]


def test_the_run_shows_the_sum_of_the_rows_its_steps_reported(db, clock, worker):
    wf = make_runnable(db, clock.now(), [
        python_step("orders", "rows", params={"rows": 3}),
        python_step("refunds", "rows", params={"rows": 4}),
        python_step("report", "noop"),
    ])
    run = queue_run(db, wf, clock.now(), clock.now())
    worker.run_once(clock.now())
    run, attempt = ran(db, run.id)
    assert (run.status, run.rows, attempt.status) == ("succeeded", 7, "succeeded")


def test_a_run_whose_steps_report_nothing_has_no_row_count(db, clock, worker):
    wf = make_runnable(db, clock.now(), [python_step("only", "noop")])
    run = queue_run(db, wf, clock.now(), clock.now())
    worker.run_once(clock.now())
    run, _ = ran(db, run.id)
    assert (run.status, run.rows) == ("succeeded", None)


def test_a_zero_row_success_is_a_plain_success_unless_rows_are_expected(db, clock, worker):
    wf = make_runnable(db, clock.now(), [python_step("load", "rows", params={"rows": 0})])
    run = queue_run(db, wf, clock.now(), clock.now())
    worker.run_once(clock.now())
    run, _ = ran(db, run.id)
    assert (run.status, run.rows, run.error_category) == ("succeeded", 0, None)


def test_it_fails_a_zero_row_success_of_a_workflow_that_expects_rows_as_retryable_empty_result(db, clock, worker):
    wf = make_runnable(db, clock.now(), [python_step("load", "rows", params={"rows": 0})], expect_rows=True)
    run = queue_run(db, wf, clock.now(), clock.now(), budget=1)
    worker.run_once(clock.now())
    run, attempt = ran(db, run.id)
    assert (attempt.status, attempt.error_category, attempt.retryable) == ("failed", "empty_result", True)
    assert "expects rows" in attempt.error
    # retryable: the tick has budget left, so the data may still arrive
    assert (run.status, run.rows, run.error_category) == ("pending_retry", 0, "empty_result")


def test_it_fails_the_tick_when_the_budget_is_spent_and_the_customer_owns_it(db, clock, worker):
    wf = make_runnable(db, clock.now(), [python_step("load", "rows", params={"rows": 0})], expect_rows=True)
    run = queue_run(db, wf, clock.now(), clock.now(), budget=0)
    worker.run_once(clock.now())
    run, _ = ran(db, run.id)
    assert (run.status, run.error_category) == ("failed", "empty_result")
    assert owner_for(run.error_category) == "customer"


def test_a_workflow_that_expects_rows_and_reports_none_fails_as_empty(db, clock, worker):
    wf = make_runnable(db, clock.now(), [python_step("load", "noop")], expect_rows=True)
    run = queue_run(db, wf, clock.now(), clock.now(), budget=0)
    worker.run_once(clock.now())
    run, _ = ran(db, run.id)
    assert (run.status, run.error_category, run.rows) == ("failed", "empty_result", None)


def test_a_workflow_that_expects_rows_succeeds_when_rows_arrive(db, clock, worker):
    wf = make_runnable(db, clock.now(), [python_step("load", "rows", params={"rows": 12})], expect_rows=True)
    run = queue_run(db, wf, clock.now(), clock.now())
    worker.run_once(clock.now())
    run, _ = ran(db, run.id)
    assert (run.status, run.rows) == ("succeeded", 12)
