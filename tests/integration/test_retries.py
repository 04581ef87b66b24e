"""The retry engine: a patient category waits its backoff, a customer's step error is retried at once."""

from datetime import UTC, datetime, timedelta

import psycopg

from tests.dbutil import TEST_URL
from tests import helpers
from tests.helpers import make_workflow
from tests.integration.pipeline import fail
from tickwarden.catalog import budget_for
from tickwarden.poller import OutcomePoller
from tickwarden.reaper import LeaseReaper
from tickwarden.simulate import Simulation, parse_scenario
from tickwarden.store import TickRequest


def daily_tick(db, clock):
    workflow = make_workflow(db, clock.now())
    budget = budget_for(86400, {}, True, None)
    request = TickRequest(workflow.tenant_id, workflow.id, clock.now(), budget.retries, budget.deadline(clock.now()),
                          budget.backoffs)
    with db.transaction() as store:
        run = store.ledger.create_tick_run(request, clock.now())
    assert run is not None
    return run


def woken(listener, loop):
    return any(n.payload == loop for n in listener.notifies(timeout=5, stop_after=1))


def lease(db, now, worker="w1", lease_seconds=600):
    with db.transaction() as store:
        return helpers.lease(store, worker, now, lease_seconds, limit=10)


def fail_first_attempt(db, clock, outcome):
    (attempt,) = lease(db, clock.now())
    finished_at = clock.advance(30)
    with db.transaction() as store:
        assert store.ledger.finish_attempt(attempt, "w1", outcome, finished_at).run_status == "pending_retry"
    return finished_at


def test_it_holds_back_a_retry_after_a_refused_connection_for_the_profiles_backoff(db, clock):
    run = daily_tick(db, clock)
    finished_at = fail_first_attempt(db, clock, fail("connection", "connection refused"))
    result = OutcomePoller(db, "p1").poll(clock.advance(2))
    assert result.retried == [run.id] and result.retry_due == [finished_at + timedelta(seconds=60)]
    assert lease(db, finished_at + timedelta(seconds=59)) == []
    (retry,) = lease(db, finished_at + timedelta(seconds=60))
    assert (retry.run_id, retry.number) == (run.id, 2)


def test_it_backs_off_longer_after_each_failed_retry(db, clock):
    run = daily_tick(db, clock)
    fail_first_attempt(db, clock, fail("connection", "connection refused"))
    poller = OutcomePoller(db, "p1")
    poller.poll(clock.advance(1))
    (second,) = lease(db, clock.advance(60))
    second_failed = clock.advance(10)
    with db.transaction() as store:
        store.ledger.finish_attempt(second, "w1", fail("connection", "connection refused"), second_failed)
    assert poller.poll(clock.advance(1)).retry_due == [second_failed + timedelta(seconds=300)]
    assert second.run_id == run.id


def test_it_retries_a_step_error_in_customer_code_at_once(db, clock):
    run = daily_tick(db, clock)
    fail_first_attempt(db, clock, fail("step_error", "KeyError: 'customer_id'"))
    polled_at = clock.advance(2)
    result = OutcomePoller(db, "p1").poll(polled_at)
    assert result.retried == [run.id] and result.retry_due == [polled_at]
    (retry,) = lease(db, polled_at)
    assert retry.number == 2


def test_it_waits_the_backoff_after_a_lost_lease_too(db, clock):
    run = daily_tick(db, clock)
    lease(db, clock.now(), lease_seconds=60)
    reaped_at = clock.advance(61)
    LeaseReaper(db).run_once(reaped_at)
    result = OutcomePoller(db, "p1").poll(clock.advance(1))
    assert result.retried == [run.id] and result.retry_due == [reaped_at + timedelta(seconds=60)]


def test_a_late_poll_does_not_delay_a_retry_whose_backoff_has_passed(db, clock):
    daily_tick(db, clock)
    fail_first_attempt(db, clock, fail("connection", "connection refused"))
    polled_at = clock.advance(600)  # the poller was down for ten minutes
    assert OutcomePoller(db, "p1").poll(polled_at).retry_due == [polled_at]


def test_finishing_an_attempt_wakes_the_poller_when_it_commits(db, clock):
    daily_tick(db, clock)
    (attempt,) = lease(db, clock.now())
    with psycopg.connect(TEST_URL, autocommit=True) as listener:
        listener.execute("LISTEN tickwarden_wake")
        with db.transaction() as store:
            store.ledger.finish_attempt(attempt, "w1", fail("connection"), clock.advance(5))
        assert woken(listener, "poller")


def test_a_reaped_lease_wakes_the_poller_when_it_commits(db, clock):
    daily_tick(db, clock)
    lease(db, clock.now(), lease_seconds=60)
    with psycopg.connect(TEST_URL, autocommit=True) as listener:
        listener.execute("LISTEN tickwarden_wake")
        LeaseReaper(db).run_once(clock.advance(61))
        assert woken(listener, "poller")


def nightly(faults):
    raw = {
        "name": "nightly", "start": "2026-11-30T01:55:00Z", "end": "2026-11-30T04:00:00Z", "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": "nightly", "cron": "0 2 * * *", "duration": 200}],
        "faults": faults,
    }
    return Simulation(parse_scenario(raw, source="test"), url=TEST_URL).run()


def test_a_daily_workflow_rides_out_a_ten_minute_warehouse_outage_without_a_message():
    outcome = nightly([{"workflow": "acme/nightly", "start": "2026-11-30T02:01:00Z", "end": "2026-11-30T02:11:00Z",
                        "error": "could not connect to warehouse: connection refused"}])
    (run,) = outcome.runs
    assert run["status"] == "succeeded" and run["recovered"]
    assert outcome.alerts == [] and outcome.notifications == []


def test_a_deterministic_step_error_still_pages_within_minutes_of_the_failure():
    outcome = nightly([{"workflow": "acme/nightly", "start": "2026-11-30T02:03:00Z", "end": "2026-11-30T04:00:00Z",
                        "error": "KeyError: 'customer_id' in recipe join_orders"}])
    (run,) = outcome.runs
    assert run["status"] == "failed" and run["attempts"] == 4
    (alert,) = outcome.alerts
    assert alert["opened_at"] - datetime(2026, 11, 30, 2, 3, tzinfo=UTC) <= timedelta(minutes=1)
