"""Maintenance windows through the real pipeline on a virtual clock: ticks and alerts go on, delivery waits."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from tests.integration.pipeline import FIVE_MIN, OK, alerts_of, events_of, fail, tick, workflow
from tickwarden import maintenance
from tickwarden.alerts import EscalationClock
from tickwarden.models import Workflow
from tickwarden.notifier import Notifier
from tickwarden.poller import OutcomePoller
from tickwarden.transports.recording import RecordingTransport
from tickwarden.simulate.simulation import SimulationRepository


@pytest.fixture
def poller(db):
    return OutcomePoller(db, "p1")


@pytest.fixture
def wf(db, clock) -> Workflow:
    found = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    with db.transaction() as store:
        SimulationRepository(store.conn).create_channel(found.tenant_id, "acme", "customer", clock.now())
        SimulationRepository(store.conn).create_channel(None, "platform", "engineering", clock.now())
    return found


def add_window(db, now: datetime, *, start: datetime, end: datetime, workflow: str | None = "check"):
    with db.transaction() as store:
        return maintenance.add_window(store, "acme", workflow, maintenance.window_spec(start=start, end=end),
                                      "test", now)


def fail_ticks(db, poller, wf, clock, count: int, first: datetime) -> None:
    for i in range(count):
        tick(db, poller, wf, first + timedelta(minutes=5 * i), [fail()], clock)


def deliveries(db) -> list[tuple[str, str, str]]:
    """(channel audience, event kind, event severity) of each outbox row by status."""
    with db.connection() as conn:
        return conn.execute(
            "SELECT o.status, e.kind, e.severity FROM notification_outbox o JOIN alert_events e ON e.id = o.event_id"
            " JOIN notification_channels c ON c.id = o.channel_id ORDER BY c.audience, o.event_id").fetchall()


def test_nothing_is_delivered_while_a_window_covers_the_workflow(db, clock, poller, wf):
    base = clock.now()
    add_window(db, base, start=base, end=base + timedelta(hours=2))
    fail_ticks(db, poller, wf, clock, 3, base + timedelta(minutes=5))
    (alert,) = alerts_of(db, wf)
    assert alert.status == "open", "ticks run and state is tracked inside the window"
    recorder = RecordingTransport()
    Notifier(db, "n1", {"recording": recorder}).run_once(clock.advance(60))
    assert recorder.messages == []
    assert {status for status, _, _ in deliveries(db)} == {"held"}
    with db.transaction() as store:
        counts = store.outbox.status_counts()
    assert (counts["held"], counts["pending"], counts["suppressed"]) == (2, 0, 0), "operators see what waits"


def test_an_alert_that_opened_and_resolved_inside_the_window_sends_nothing(db, clock, poller, wf):
    base = clock.now()
    window = add_window(db, base, start=base, end=base + timedelta(hours=2))
    fail_ticks(db, poller, wf, clock, 3, base + timedelta(minutes=5))
    tick(db, poller, wf, base + timedelta(minutes=20), [OK], clock)
    (alert,) = alerts_of(db, wf)
    assert alert.status == "resolved"
    recorder = RecordingTransport()
    notifier = Notifier(db, "n1", {"recording": recorder})
    notifier.run_once(clock.advance(60))
    clock.set(window.ends_at)
    notifier.run_once(clock.now())
    notifier.run_once(clock.advance(600))
    assert recorder.messages == []
    assert {status for status, _, _ in deliveries(db)} == {"suppressed"}


def test_an_alert_still_open_at_the_end_is_delivered_once_at_its_current_severity(db, clock, poller, wf):
    base = clock.now()
    window = add_window(db, base, start=base, end=base + timedelta(hours=2))
    fail_ticks(db, poller, wf, clock, 6, base + timedelta(minutes=5))  # opens at 3, escalates at 6
    (alert,) = alerts_of(db, wf)
    assert alert.severity == "critical"
    recorder = RecordingTransport()
    notifier = Notifier(db, "n1", {"recording": recorder})
    assert notifier.run_once(clock.advance(60)) <= window.ends_at, "the notifier wakes when the window ends"
    assert recorder.messages == []
    clock.set(window.ends_at)
    notifier.run_once(clock.now())
    assert sorted(r.channel for r in recorder.messages) == ["acme", "platform"], "one message per channel"
    assert [(s, k, sev) for s, k, sev in deliveries(db) if s == "sent"] == [
        ("sent", "escalated", "critical"), ("sent", "escalated", "critical")]
    notifier.run_once(clock.advance(600))
    assert len(recorder.messages) == 2, "nothing held is replayed"
    # later events follow in the same thread as usual
    tick(db, poller, wf, clock.now() + timedelta(minutes=5), [OK], clock)
    notifier.run_once(clock.advance(1))
    assert [r.reply for r in recorder.messages[2:]] == [True, True]


def test_an_alert_opened_before_the_window_hears_its_resolution_when_the_window_ends(db, clock, poller, wf):
    base = clock.now()
    fail_ticks(db, poller, wf, clock, 3, base + timedelta(minutes=5))
    recorder = RecordingTransport()
    notifier = Notifier(db, "n1", {"recording": recorder})
    notifier.run_once(clock.advance(1))
    assert len(recorder.messages) == 2
    window = add_window(db, clock.now(), start=clock.now(), end=clock.now() + timedelta(hours=1))
    tick(db, poller, wf, clock.now() + timedelta(minutes=5), [OK], clock)
    notifier.run_once(clock.advance(1))
    assert len(recorder.messages) == 2, "the resolution waits for the window's end"
    clock.set(window.ends_at)
    notifier.run_once(clock.now())
    assert len(recorder.messages) == 4 and all(r.reply for r in recorder.messages[2:])


def test_a_tenant_wide_recurring_window_holds_every_workflow_of_the_tenant(db, clock, poller, wf):
    base = clock.now()  # 01:55 UTC; the window opens daily at 02:00 for an hour
    with db.transaction() as store:
        maintenance.add_window(store, "acme", None,
                               maintenance.window_spec(cron="0 2 * * *", duration="1h", timezone="UTC"), "test", base)
    fail_ticks(db, poller, wf, clock, 3, base + timedelta(minutes=10))
    recorder = RecordingTransport()
    notifier = Notifier(db, "n1", {"recording": recorder})
    notifier.run_once(clock.advance(1))
    assert recorder.messages == []
    notifier.run_once(datetime.fromisoformat("2026-11-30T03:00:00+00:00"))
    assert len(recorder.messages) == 2


def test_a_window_that_ends_into_another_keeps_holding_until_the_last_ends(db, clock, poller, wf):
    base = clock.now()
    first = add_window(db, base, start=base, end=base + timedelta(hours=1))
    fail_ticks(db, poller, wf, clock, 3, base + timedelta(minutes=5))
    second = add_window(db, clock.now(), start=first.ends_at, end=first.ends_at + timedelta(hours=1))
    recorder = RecordingTransport()
    notifier = Notifier(db, "n1", {"recording": recorder})
    notifier.run_once(first.ends_at)
    assert recorder.messages == []
    notifier.run_once(second.ends_at)
    assert len(recorder.messages) == 2


def test_two_notifier_replicas_release_a_window_once(db, clock, poller, wf):
    base = clock.now()
    window = add_window(db, base, start=base, end=base + timedelta(hours=2))
    fail_ticks(db, poller, wf, clock, 4, base + timedelta(minutes=5))
    recorder = RecordingTransport()
    replicas = [Notifier(db, f"n{i}", {"recording": recorder}) for i in range(3)]
    barrier = threading.Barrier(len(replicas))

    def run(notifier: Notifier) -> None:
        barrier.wait()
        notifier.run_once(window.ends_at)

    threads = [threading.Thread(target=run, args=(n,)) for n in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for notifier in replicas:
        notifier.run_once(window.ends_at + timedelta(seconds=1))
    assert sorted(r.channel for r in recorder.messages) == ["acme", "platform"]


def test_escalation_time_does_not_run_during_a_window(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check", policy={"escalate_after": 50})
    base = clock.now()
    fail_ticks(db, poller, wf, clock, 3, base + timedelta(minutes=5))
    (alert,) = alerts_of(db, wf)
    assert alert.severity == "warning"
    budget = alert.escalate_at - alert.opened_at
    # a window of one hour starting halfway to the escalation
    start = alert.opened_at + budget / 2
    window = add_window(db, clock.now(), start=start, end=start + timedelta(hours=1))
    escalation = EscalationClock(db)
    escalation.run_once(alert.escalate_at)
    assert escalation.last == [] and alerts_of(db, wf)[0].severity == "warning"
    moved = alerts_of(db, wf)[0].escalate_at
    assert moved == alert.escalate_at + (window.ends_at - window.starts_at)
    escalation.run_once(moved - timedelta(seconds=1))
    assert escalation.last == []
    escalation.run_once(moved)
    assert escalation.last == [alert.id]
    assert events_of(db, alert.id)[-1].kind == "escalated"


def test_two_escalation_replicas_defer_and_escalate_once(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check", policy={"escalate_after": 50})
    base = clock.now()
    fail_ticks(db, poller, wf, clock, 3, base + timedelta(minutes=5))
    (alert,) = alerts_of(db, wf)
    window = add_window(db, clock.now(), start=alert.opened_at, end=alert.opened_at + timedelta(hours=1))
    clocks = [EscalationClock(db) for _ in range(2)]
    barrier = threading.Barrier(2)

    def run(loop: EscalationClock, at: datetime) -> None:
        barrier.wait()
        loop.run_once(at)

    for at in (alert.escalate_at, window.ends_at + (alert.escalate_at - alert.opened_at)):
        threads = [threading.Thread(target=run, args=(c, at)) for c in clocks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [e.kind for e in events_of(db, alert.id)].count("escalated") == 1
    assert sum(len(c.last) for c in clocks) == 1


def test_suppressed_deliveries_expire_with_the_outbox_retention(db, clock, poller, wf):
    from tickwarden import retention
    from tickwarden.retention import RetentionSpec, RetentionSweeper

    base = clock.now()
    window = add_window(db, base, start=base, end=base + timedelta(hours=2))
    fail_ticks(db, poller, wf, clock, 3, base + timedelta(minutes=5))
    tick(db, poller, wf, base + timedelta(minutes=20), [OK], clock)
    Notifier(db, "n1", {"recording": RecordingTransport()}).run_once(window.ends_at)
    assert {status for status, _, _ in deliveries(db)} == {"suppressed"}
    with db.transaction() as store:
        retention.set_tenant_retention(store, wf.tenant_id, RetentionSpec(outbox_days=1), base)
    RetentionSweeper(db).run_once(window.ends_at + timedelta(days=2))
    assert deliveries(db) == []
    assert len(alerts_of(db, wf)) == 1, "the alert's history stays for its own horizon"


def test_an_event_written_after_the_end_but_before_the_release_joins_the_held_thread(db, clock, poller, wf):
    base = clock.now()
    window = add_window(db, base, start=base, end=base + timedelta(hours=2))
    fail_ticks(db, poller, wf, clock, 3, base + timedelta(minutes=5))
    # the window is over, the notifier has not passed yet, and the alert resolves
    clock.set(window.ends_at + timedelta(seconds=5))
    tick(db, poller, wf, clock.now(), [OK], clock)
    assert alerts_of(db, wf)[0].status == "resolved"
    recorder = RecordingTransport()
    Notifier(db, "n1", {"recording": recorder}).run_once(clock.advance(1))
    assert recorder.messages == [], "no channel hears a resolution of an alert it never heard of"
    assert {status for status, _, _ in deliveries(db)} == {"suppressed"}
