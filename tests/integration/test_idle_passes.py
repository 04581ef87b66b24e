"""Idle passes: one read-only statement, no transaction; a pass with work still does it all."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.dbutil import TEST_URL
from tests.helpers import create_run, lease, make_workflow
from tests.integration.notify_builders import add_channel, open_alert, outbox
from tickwarden.db import Database
from tickwarden.alerts import EscalationClock
from tickwarden.models import AttemptOutcome
from tickwarden.notifier import Notifier
from tickwarden.poller import OutcomePoller
from tickwarden.reaper import LeaseReaper
from tickwarden.transports.recording import RecordingTransport


def loops(db):
    return [LeaseReaper(db), OutcomePoller(db, "p1"), EscalationClock(db),
            Notifier(db, "n1", {"recording": RecordingTransport()})]


def test_idle_passes_open_no_transaction(db, clock, counted):
    make_workflow(db, clock.now())
    counted.clear()
    for loop in loops(db):
        following = loop.run_once(clock.now())
        assert following > clock.now(), loop.name
        assert counted == [], loop.name


def test_a_pass_with_work_still_does_it(db, clock, counted):
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now(), budget=1)
    with db.transaction() as store:
        lease(store, "w1", clock.now(), 30, limit=10)
    counted.clear()
    reaper, poller, _, _ = loops(db)
    reaper.run_once(clock.now() + timedelta(seconds=29))
    assert counted == [] and reaper.last_reaped == []
    reaper.run_once(clock.now() + timedelta(seconds=31))
    assert [r.run_id for r in reaper.last_reaped] == [run.id]
    poller.run_once(clock.now() + timedelta(seconds=32))
    assert poller.last.claimed == 1 and poller.last.retried == [run.id]


def test_each_idle_check_sees_exactly_the_work_of_its_pass(db, clock):
    now = clock.now()
    wf = make_workflow(db, now)
    with db.probe() as store:
        assert (store.execution.reaper_waiting(now), store.monitoring.finished_attempts_waiting(now),
                store.monitoring.escalations_waiting(now), store.outbox.waiting(["recording"], now)) == (
            False, False, False, (False, None))
    create_run(db, wf, now, now)
    with db.transaction() as store:
        [attempt] = lease(store, "w1", now, 30, limit=10)
    with db.probe() as store:
        assert not store.execution.reaper_waiting(now + timedelta(seconds=29))
        assert store.execution.reaper_waiting(now + timedelta(seconds=30))
    with db.transaction() as store:
        store.ledger.finish_attempt(attempt, "w1", AttemptOutcome(status="succeeded"), now + timedelta(seconds=5))
    with db.probe() as store:
        assert not store.monitoring.finished_attempts_waiting(now + timedelta(seconds=4))
        assert store.monitoring.finished_attempts_waiting(now + timedelta(seconds=5))


def test_the_notifiers_idle_check_reports_stale_claims_and_the_next_due_delivery(db, clock):
    now = clock.now()
    add_channel(db, now, tenant="acme", name="rec", kind="recording", audience="customer")
    open_alert(db, now)
    with db.probe() as store:
        assert store.outbox.waiting(["recording"], now) == (False, now)
        assert store.outbox.waiting(["slack"], now) == (False, None)
    with db.transaction() as store:
        store.outbox.claim_outbox("gone", now, now + timedelta(seconds=300), 10, ["recording"])
    with db.probe() as store:
        assert store.outbox.waiting(["recording"], now + timedelta(seconds=299)) == (False, None)
        assert store.outbox.waiting(["recording"], now + timedelta(seconds=300))[0] is True
    recorder = RecordingTransport()
    Notifier(db, "n1", {"recording": recorder}).run_once(now + timedelta(seconds=300))
    assert len(recorder.messages) == 1 and outbox(db)[0]["status"] == "sent"


def test_a_probe_gives_its_connection_back_in_transaction_mode_even_after_an_error(schema):
    db = Database(TEST_URL, schema=schema, min_size=1, max_size=1)
    try:
        with pytest.raises(ZeroDivisionError), db.probe() as store:
            assert store.conn.autocommit
            1 / 0  # noqa: B018 - the division raises inside the block
        with db.connection() as conn:
            assert not conn.autocommit
    finally:
        db.close()


def test_a_poller_pass_after_a_busy_one_claims_without_looking_first(db, clock, counted):
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now())
    with db.transaction() as store:
        [attempt] = lease(store, "w1", clock.now(), 30, limit=10)
        store.ledger.finish_attempt(attempt, "w1", AttemptOutcome(status="succeeded"), clock.now())
    poller = OutcomePoller(db, "p1")
    counted.clear()
    poller.run_once(clock.now())
    assert poller.last.claimed == 1 and counted == [1]  # looked, then claimed
    poller.run_once(clock.now() + timedelta(seconds=30))
    assert poller.last.claimed == 0 and counted == [1, 1]  # straight to the claim, which found nothing
    poller.run_once(clock.now() + timedelta(seconds=60))
    assert counted == [1, 1]  # idle again: one look, no transaction
    with db.transaction() as store:
        assert store.ledger.get_run(run.id).status == "succeeded"
