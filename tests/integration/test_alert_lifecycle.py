"""The alert lifecycle by hand: acknowledge, snooze, resolve with a note, internal notes, pause, manual runs."""

from datetime import timedelta

import pytest

from tests.integration.notify_builders import add_channel, outbox
from tests.integration.pipeline import (
    FIVE_MIN,
    alerts_of,
    drive,
    events_of,
    fail,
    manual_run,
    tick,
    workflow,
)
from tickwarden import alerts, catalog
from tickwarden.errors import Conflict, InvalidInput, NotFound
from tickwarden.alerts import EscalationClock
from tickwarden.poller import OutcomePoller


@pytest.fixture
def poller(db):
    return OutcomePoller(db, "p1")


@pytest.fixture
def channels(db, clock):
    customer = add_channel(db, clock.now(), tenant="acme", name="acme-alerts", kind="recording", audience="customer")
    platform = add_channel(db, clock.now(), tenant=None, name="oncall", kind="recording", audience="engineering")
    return customer.id, platform.id


def open_warning(db, clock, poller):
    """A five-minute workflow: opens a warning at 3 failures, escalates at 6 or at escalate_at."""
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    base = clock.now()
    for i in range(3):
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [fail()], clock)
    (alert,) = alerts_of(db, wf)
    assert alert.severity == "warning"
    return wf, alert


def fanned_out(db, kind):
    return sorted(row["channel_id"] for row in outbox(db) if row["kind"] == kind)


def test_it_stops_escalating_an_acknowledged_alert_and_tells_every_channel(db, clock, poller, channels):
    wf, alert = open_warning(db, clock, poller)
    event = alerts.acknowledge(db, alert.id, "ana", clock.now(), note="looking into it")
    assert (event.kind, event.actor, event.note) == ("acknowledged", "ana", "looking into it")
    assert fanned_out(db, "acknowledged") == sorted(channels)
    base = clock.now()
    for i in range(4):  # failures beyond escalate_after (6)
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [fail()], clock)
    EscalationClock(db).run_once(alert.escalate_at + timedelta(hours=1))
    (after,) = alerts_of(db, wf)
    assert (after.status, after.severity, after.acknowledged_by) == ("open", "warning", "ana")
    assert after.failure_count == 7 and "escalated" not in [e.kind for e in events_of(db, alert.id)]
    with pytest.raises(Conflict, match="already acknowledged"):
        alerts.acknowledge(db, alert.id, "bob", clock.now())


def test_it_holds_escalation_while_snoozed_and_escalates_after(db, clock, poller, channels):
    wf, alert = open_warning(db, clock, poller)
    clock.set(alert.escalate_at - timedelta(minutes=1))
    alerts.snooze(db, alert.id, 3600, "ana", clock.now())
    escalation = EscalationClock(db)
    escalation.run_once(alert.escalate_at + timedelta(minutes=30))
    assert alerts_of(db, wf)[0].severity == "warning" and escalation.last == []
    escalation.run_once(clock.now() + timedelta(hours=1))
    assert alerts_of(db, wf)[0].severity == "critical"
    assert fanned_out(db, "snoozed") == sorted(channels)
    with pytest.raises(InvalidInput, match="1 minute to 30 days"):
        alerts.snooze(db, alert.id, 5, "ana", clock.now())


def test_it_resolves_by_hand_only_with_a_note(db, clock, poller, channels):
    wf, alert = open_warning(db, clock, poller)
    with pytest.raises(InvalidInput, match="needs a note"):
        alerts.resolve(db, alert.id, "  ", "ana", clock.now())
    event = alerts.resolve(db, alert.id, "fixed the upstream export by hand", "ana", clock.advance(600))
    assert event.kind == "resolved" and event.data["manual"] is True
    (after,) = alerts_of(db, wf)
    assert after.status == "resolved" and after.resolved_by_run_id is None
    assert after.downtime_seconds == int((clock.now() - alert.first_failure_at).total_seconds())
    assert fanned_out(db, "resolved") == sorted(channels)
    with pytest.raises(Conflict, match="already resolved"):
        alerts.resolve(db, alert.id, "again", "ana", clock.now())
    with pytest.raises(NotFound):
        alerts.acknowledge(db, 999999, "ana", clock.now())


def test_an_internal_note_never_reaches_the_customer_channel(db, clock, poller, channels):
    customer, platform = channels
    _, alert = open_warning(db, clock, poller)
    internal = alerts.add_note(db, alert.id, "their DBA dropped the table again", "ana", clock.now(), internal=True)
    public = alerts.add_note(db, alert.id, "we are on it", "ana", clock.now())
    assert internal.internal and not public.internal
    by_event = {}
    for row in outbox(db):
        by_event.setdefault(row["event_id"], []).append(row["channel_id"])
    assert by_event[internal.id] == [platform]
    assert sorted(by_event[public.id]) == sorted([customer, platform])


def test_manual_runs_while_an_alert_is_open_do_not_count_towards_escalation(db, clock, poller):
    wf, _ = open_warning(db, clock, poller)
    for _ in range(4):  # 3 + 4 = 7 consecutive failures, 4 of them manual: 3 count, below 6
        drive(db, poller, manual_run(db, wf, clock.now()), [fail()], clock)
    (after,) = alerts_of(db, wf)
    assert after.failure_count == 7 and after.manual_failures == 4 and after.severity == "warning"
    EscalationClock(db).run_once(clock.advance(60))
    assert alerts_of(db, wf)[0].severity == "warning"
    base = clock.now()
    for i in range(3):  # three more scheduled failures reach the threshold
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [fail()], clock)
    assert alerts_of(db, wf)[0].severity == "critical"


def test_pausing_a_workflow_with_an_open_alert_says_so_in_its_thread(db, clock, poller, channels):
    wf, alert = open_warning(db, clock, poller)
    catalog.pause(db, "acme", "check", clock.now(), actor="ana")
    paused = [e for e in events_of(db, alert.id) if e.kind == "paused"]
    assert len(paused) == 1 and paused[0].actor == "ana" and "paused" in paused[0].note
    assert fanned_out(db, "paused") == sorted(channels)
    catalog.pause(db, "acme", "check", clock.now(), actor="ana")  # already paused: nothing new
    assert [e.kind for e in events_of(db, alert.id)].count("paused") == 1
    assert alerts_of(db, wf)[0].status == "open"
