import threading
from collections import defaultdict
from datetime import timedelta

from tests.dbutil import TEST_URL
from tests.integration.notify_builders import add_channel, add_event, open_alert, outbox
from tickwarden.db import Database
from tickwarden.notifier import Notifier, backoff_seconds
from tickwarden.transports.base import TransportError
from tickwarden.transports.recording import RecordingTransport


def test_a_crashed_senders_rows_are_claimed_again_after_the_lease(db, clock):
    add_channel(db, clock.now(), tenant="acme", name="rec", kind="recording", audience="customer")
    open_alert(db, clock.now())
    with db.transaction() as store:  # a replica claims the row and dies before sending
        [claimed_id] = store.outbox.claim_outbox("dead-replica", clock.now(), clock.now() + timedelta(seconds=300), 10,
                                       ["recording"])
    recorder = RecordingTransport()
    survivor = Notifier(db, "n2", {"recording": recorder}, lease_seconds=300)
    survivor.run_once(clock.advance(60))
    assert recorder.messages == [] and outbox(db)[0]["status"] == "sending"
    survivor.run_once(clock.advance(300))
    assert len(recorder.messages) == 1
    row = outbox(db)[0]
    assert row["status"] == "sent" and row["id"] == claimed_id and row["locked_by"] is None
    # the crashed replica cannot record anything on a row it no longer holds
    with db.transaction() as store:
        assert not store.outbox.mark_outbox_sent(claimed_id, "dead-replica", clock.now())


def test_a_shadow_alert_reaches_only_shadow_channels(db, clock):
    add_channel(db, clock.now(), tenant="acme", name="customer", kind="recording", audience="customer")
    add_channel(db, clock.now(), tenant=None, name="eng", kind="recording", audience="engineering")
    add_channel(db, clock.now(), tenant="acme", name="shadow", kind="recording", audience="shadow")
    recorder = RecordingTransport()
    n = Notifier(db, "n1", {"recording": recorder})
    shadow_alert = open_alert(db, clock.now(), shadow=True)
    add_event(db, shadow_alert, "resolved", clock.advance(60))
    live_alert = open_alert(db, clock.advance(60), workflow="other")
    n.run_once(clock.now())
    heard = [(m.channel, m.alert_id, m.reply) for m in recorder.messages]
    assert sorted(heard) == sorted([("acme-shadow", shadow_alert, False), ("acme-shadow", shadow_alert, True),
                                    ("acme", live_alert, False), ("platform", live_alert, False)])
    assert {m.thread_key for m in recorder.messages} == {  # deterministic: <channel>-<alert id>
        f"acme-shadow-{shadow_alert}", f"acme-{live_alert}", f"platform-{live_alert}"}
    shadow_text = [m.message.rendered for m in recorder.messages if m.alert_id == shadow_alert]
    assert all(r.subject.startswith("[tickwarden shadow]") for r in shadow_text)


def test_a_channel_that_fails_is_not_hammered_within_one_pass(db, clock):
    add_channel(db, clock.now(), tenant="acme", name="flaky", kind="recording", audience="customer")

    class Down:
        calls = 0

        def send(self, message):
            Down.calls += 1
            raise TransportError("connection refused", permanent=False)

    for i in range(5):
        open_alert(db, clock.now(), workflow=f"wf{i}")
    Notifier(db, "n1", {"recording": Down()}).run_once(clock.now())
    rows = outbox(db)
    assert Down.calls == 1
    assert {r["status"] for r in rows} == {"failed", "pending"}
    assert [r["tries"] for r in rows].count(0) == 4  # deferred, not counted as tries
    assert len({r["next_attempt_at"] for r in rows}) == 1


def test_backoff_grows_exponentially_with_deterministic_jitter():
    delays = [backoff_seconds(t, 42, base=30, cap=3600) for t in range(10)]
    assert delays == [backoff_seconds(t, 42, base=30, cap=3600) for t in range(10)]
    assert all(30 * 2**t <= d <= 30 * 2**t * 1.25 for t, d in enumerate(delays[:6]))
    assert max(delays) == 3600
    assert len({backoff_seconds(2, row, base=30, cap=3600) for row in range(50)}) > 10  # rows spread out


class FlakyRecorder(RecordingTransport):
    """Fails every third call (transiently), to mix retries into the race."""

    def __init__(self):
        super().__init__()
        self._calls = 0
        self._gate = threading.Lock()

    def send(self, message):
        with self._gate:
            self._calls += 1
            fail = self._calls % 3 == 0
        if fail:
            raise TransportError("flaky network", permanent=False)
        return super().send(message)


def test_three_replicas_deliver_every_event_once_per_channel_with_threads_intact(db, clock, schema):
    add_channel(db, clock.now(), tenant="acme", name="customer", kind="recording", audience="customer")
    add_channel(db, clock.now(), tenant="globex", name="customer", kind="recording", audience="customer")
    add_channel(db, clock.now(), tenant=None, name="eng", kind="recording", audience="engineering")
    recorder = FlakyRecorder()
    databases = [Database(TEST_URL, schema=schema, min_size=1, max_size=2) for _ in range(3)]
    replicas = [Notifier(d, f"r{i}", {"recording": recorder}, batch=5, base_backoff=1, max_backoff=4, max_tries=50)
                for i, d in enumerate(databases)]
    alerts = []
    try:
        for i in range(12):
            alerts.append(open_alert(db, clock.now(), tenant=("acme", "globex")[i % 2], workflow=f"wf{i}"))
        errors = []
        sent_by = defaultdict(int)

        def race(replica, now):
            try:
                replica.run_once(now)
                sent_by[replica.replica_id] += replica.last_pass.sent
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        for step in range(40):
            now = clock.advance(5)
            if step in (3, 8):
                for alert in alerts:
                    add_event(db, alert, "escalated" if step == 3 else "reassigned", now)
            if step == 15:
                for alert in alerts:
                    add_event(db, alert, "resolved", now)
            threads = [threading.Thread(target=race, args=(r, now)) for r in replicas]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert errors == []
    finally:
        for d in databases:
            d.close()

    assert len([r for r in sent_by.values() if r]) >= 2  # the work really was shared
    rows = outbox(db)
    assert len(rows) == 12 * 4 * 2 and {r["status"] for r in rows} == {"sent"}
    keys = [m.message.key for m in recorder.messages]
    assert len(keys) == len(set(keys)) == len(rows)  # exactly once per (event, channel)
    by_thread = defaultdict(list)
    for m in recorder.messages:
        by_thread[(m.channel, m.alert_id)].append(m)
    assert len(by_thread) == 24
    for messages in by_thread.values():
        assert [m.reply for m in messages] == [False, True, True, True]
        assert len({m.thread_key for m in messages}) == 1
        events = [int(m.message.key.split(".")[1].removeprefix("event-")) for m in messages]
        assert events == sorted(events)  # in event order


def test_the_next_wake_up_is_when_the_head_of_a_blocked_thread_is_due(db, clock):
    add_channel(db, clock.now(), tenant="acme", name="rec", kind="recording", audience="customer")

    class Down:
        def send(self, message):
            raise TransportError("connection refused", permanent=False)

    alert = open_alert(db, clock.now())
    n = Notifier(db, "n1", {"recording": Down()}, base_backoff=60, poll_seconds=600)
    n.run_once(clock.now())
    add_event(db, alert, "escalated", clock.advance(5))  # due now, but waits behind the opening message
    wake = n.run_once(clock.now())
    head = outbox(db)[0]
    assert wake == head["next_attempt_at"] > clock.now()
    # a replica without a transport for the kind neither claims the rows nor wakes for them
    other = Notifier(db, "n2", {"slack": Down()}, poll_seconds=600)
    assert other.run_once(clock.now()) == clock.now() + timedelta(seconds=600)


def test_recording_a_delivery_relaxes_only_its_own_commit(clock, schema):
    # one connection, so the connection that recorded the delivery is the one looked at after
    db = Database(TEST_URL, schema=schema, min_size=1, max_size=1)
    try:
        add_channel(db, clock.now(), tenant="acme", name="rec", kind="recording", audience="customer")
        open_alert(db, clock.now())
        recorder = RecordingTransport()
        Notifier(db, "n1", {"recording": recorder}).run_once(clock.now())
        assert len(recorder.messages) == 1
        with db.transaction() as store:
            assert store.conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    finally:
        db.close()
