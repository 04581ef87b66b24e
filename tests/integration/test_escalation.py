"""The escalation clock: warnings become critical by time (cadence captured at open) or by failures."""

from datetime import timedelta

import pytest

from tests.helpers import republish
from tests.integration.pipeline import FIVE_MIN, HOURLY, alerts_of, events_of, fail, tick, workflow
from tickwarden.alerts import EscalationClock
from tickwarden.poller import OutcomePoller


@pytest.fixture
def poller(db):
    return OutcomePoller(db, "p1")


def open_warning(db, clock, poller, *, cadence=FIVE_MIN, policy=None):
    wf = workflow(db, clock.now(), cadence=cadence, name="check", policy=policy or {"escalate_after": 50})
    base = clock.now()
    for i in range(3 if cadence == FIVE_MIN else 2):
        tick(db, poller, wf, base + timedelta(seconds=cadence * (i + 1)), [fail()] * (1 if cadence == FIVE_MIN else 2), clock)
    (alert,) = alerts_of(db, wf)
    assert alert.severity == "warning"
    return wf, alert


def test_a_warning_escalates_at_opened_at_plus_multiplier_times_cadence(db, clock, poller):
    wf, alert = open_warning(db, clock, poller)
    escalation = EscalationClock(db)
    clock.set(alert.escalate_at - timedelta(seconds=1))
    escalation.run_once(clock.now())
    assert escalation.last == [] and alerts_of(db, wf)[0].severity == "warning"
    clock.set(alert.escalate_at)
    assert escalation.run_once(clock.now()) == clock.now() + timedelta(seconds=60)
    (after,) = alerts_of(db, wf)
    assert (after.severity, after.first_severity, after.escalated_at) == ("critical", "warning", clock.now())
    escalation.run_once(clock.advance(60))
    assert escalation.last == []
    kinds = [e.kind for e in events_of(db, alert.id)]
    assert kinds.count("escalated") == 1
    assert events_of(db, alert.id)[-1].data["reason"] == "time"


def test_editing_the_schedule_later_does_not_move_escalate_at(db, clock, poller):
    wf, alert = open_warning(db, clock, poller)
    with db.transaction() as store:  # the workflow becomes hourly mid-incident
        republish(store, wf, clock.now(), cron="0 * * * *", cadence_seconds=HOURLY)
    tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail()] * 2, clock)
    (updated,) = alerts_of(db, wf)
    assert updated.failure_count == 4
    assert updated.escalate_at == alert.escalate_at and updated.cadence_seconds == FIVE_MIN
    EscalationClock(db).run_once(alert.escalate_at)
    assert alerts_of(db, wf)[0].severity == "critical"


def test_continued_failures_escalate_at_once_in_the_evaluator(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")  # default: open at 3, escalate at 6
    base = clock.now()
    for i in range(5):
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [fail()], clock)
    assert alerts_of(db, wf)[0].severity == "warning"
    tick(db, poller, wf, base + timedelta(minutes=30), [fail()], clock)
    (alert,) = alerts_of(db, wf)
    assert alert.severity == "critical" and alert.failure_count == 6
    assert alert.escalated_at < alert.escalate_at
    assert [e.kind for e in events_of(db, alert.id)] == ["opened", "failed", "failed", "failed", "escalated"]
    assert events_of(db, alert.id)[-1].data["reason"] == "failures"


def test_the_clock_escalates_a_warning_whose_failures_reached_the_threshold(db, clock, poller):
    wf, alert = open_warning(db, clock, poller)
    with db.connection() as conn:  # as if the evaluator had stopped short of escalating
        conn.execute("UPDATE alerts SET escalate_after = 3 WHERE id = %s", (alert.id,))
    escalation = EscalationClock(db)
    escalation.run_once(clock.advance(60))
    assert escalation.last == [alert.id]
    assert events_of(db, alert.id)[-1].data["reason"] == "failures"


def test_an_alert_that_opens_with_enough_failures_opens_and_escalates_in_order(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check", monitoring=False)
    base = clock.now()
    for i in range(6):
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [fail()], clock)
    with db.transaction() as store:  # monitoring turned on mid-streak
        republish(store, wf, clock.now(), monitoring_enabled=True)
    tick(db, poller, wf, base + timedelta(minutes=35), [fail()], clock)
    (alert,) = alerts_of(db, wf)
    assert (alert.first_severity, alert.severity, alert.failure_count) == ("warning", "critical", 7)
    assert [e.kind for e in events_of(db, alert.id)] == ["opened", "escalated"]


def test_an_evaluation_says_when_its_alerts_may_first_be_the_clocks_work(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")  # default: open at 3, escalate at 6
    base = clock.now()
    for i in range(2):
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [fail()], clock)
        assert poller.last.evaluation.escalation_due is None  # no alert yet
    tick(db, poller, wf, base + timedelta(minutes=15), [fail()], clock)
    (alert,) = alerts_of(db, wf)
    assert poller.last.evaluation.opened == [alert.id]
    assert poller.last.evaluation.escalation_due == alert.escalate_at  # a new warning escalates by time
    tick(db, poller, wf, base + timedelta(minutes=20), [fail()], clock)
    # a failure counted short of escalation leaves escalate_at where it was: nothing sooner
    assert poller.last.evaluation.updated == [alert.id] and poller.last.evaluation.escalation_due is None
    tick(db, poller, wf, base + timedelta(minutes=25), [fail()], clock)
    with db.connection() as conn:  # snoozed: the evaluator cannot promote it when its failures reach 6
        conn.execute("UPDATE alerts SET snoozed_until = %s WHERE id = %s", (clock.now() + timedelta(hours=1), alert.id))
    tick(db, poller, wf, base + timedelta(minutes=30), [fail()], clock)
    (after,) = alerts_of(db, wf)
    assert (after.severity, after.failure_count) == ("warning", 6)
    due = poller.last.evaluation.escalation_due
    assert due is not None and after.last_failure_at <= due <= clock.now() < after.escalate_at  # at once, at the earliest
