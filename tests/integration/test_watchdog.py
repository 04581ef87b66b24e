"""The watcher watched: a loop that passes on no replica for its span opens one platform alert,
delivered once to the platform's own channels by any healthy replica, resolved when the loop
runs again; and the external heartbeat is pinged only while everything is healthy."""

from __future__ import annotations

import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.apiutil import free_port
from tests.integration.notify_builders import add_channel
from tickwarden.errors import UsageError
from tickwarden.service import Service
from tickwarden.transports.base import Delivery, OutgoingMessage, TransportError
from tickwarden.transports.recording import RecordingTransport
from tickwarden.watchdog import HEARTBEAT_URL_ENV, Watchdog, heartbeat_url, stall_span

LOOPS = ["ticker", "poller", "notifier"]


def beat(db, replica, loop, at, interval=30):
    with db.transaction() as store:
        store.heartbeat.record_heartbeat(replica, loop, at, 1.0, None, at + timedelta(seconds=interval))


def all_beat(db, at, replica="r1", loops=LOOPS):
    for loop in loops:
        beat(db, replica, loop, at)


def platform_alerts(db):
    with db.connection() as conn:
        return conn.execute("SELECT id, loop, status, opened_by, resolved_by FROM platform_alerts ORDER BY id"
                            ).fetchall()


def channels(db, clock):
    add_channel(db, clock.now(), tenant=None, name="platform-pager", kind="recording", audience="engineering")
    add_channel(db, clock.now(), tenant="acme", name="acme-rec", kind="recording", audience="customer")


def test_the_span_is_three_intervals_and_never_under_two_minutes():
    assert stall_span(30) == timedelta(minutes=2)
    assert stall_span(60) == timedelta(minutes=3)
    assert stall_span(3600) == timedelta(hours=3)
    assert stall_span(None) == timedelta(minutes=3)  # no announced sleep: a minute is assumed


def test_a_loop_stalled_on_every_replica_opens_one_platform_alert_and_resolves_when_it_runs(db, clock):
    channels(db, clock)
    recording = RecordingTransport()
    dog = Watchdog(db, "r1", LOOPS, {"recording": recording}, dashboard_url="https://tw.example")
    start = clock.now()
    all_beat(db, start)
    beat(db, "r2", "ticker", start - timedelta(hours=1))  # an old replica's row does not hide the newest
    dog.run_once(start)
    assert dog.last.stalled == [] and platform_alerts(db) == []

    # the poller keeps passing on r1; the ticker stops everywhere
    for minutes in (1, 2):
        beat(db, "r1", "poller", start + timedelta(minutes=minutes))
        beat(db, "r1", "notifier", start + timedelta(minutes=minutes))
    dog.run_once(start + timedelta(minutes=2))  # exactly at the span: not yet
    assert dog.last.stalled == []
    clock.set(start + timedelta(minutes=2, seconds=1))
    dog.run_once(clock.now())
    assert dog.last.stalled == ["ticker"]
    [(alert_id, loop, status, opened_by, _)] = platform_alerts(db)
    assert (loop, status, opened_by) == ("ticker", "open", "r1")
    # delivered to the platform's channel only, once, saying what stopped and since when
    [sent] = recording.messages
    assert sent.channel == "platform" and not sent.reply
    rendered = sent.message.rendered
    assert "ticker loop has not run on any replica since" in rendered.text
    assert rendered.payload["platform_alert"]["loop"] == "ticker" and rendered.payload["severity"] == "critical"
    assert "https://tw.example/dashboard" in rendered.text

    # later passes while it stays stalled send nothing more
    for seconds in (60, 600):
        clock.advance(seconds)
        all_beat(db, clock.now(), loops=["poller", "notifier"])
        dog.run_once(clock.now())
    assert len(recording.messages) == 1 and len(platform_alerts(db)) == 1

    # the ticker runs again (on any replica): resolved, in the same thread
    beat(db, "r2", "ticker", clock.advance(5))
    all_beat(db, clock.now())
    dog.run_once(clock.advance(1))
    assert platform_alerts(db) == [(alert_id, "ticker", "resolved", "r1", "r1")]
    opened, resolved = recording.messages
    assert resolved.reply and resolved.thread_key == opened.thread_key
    assert "runs again" in resolved.message.rendered.text

    # a new stall is a new alert
    dog.run_once(clock.advance(3600))
    assert [a[2] for a in platform_alerts(db)] == ["resolved", "open", "open", "open"]


def test_a_watched_loop_that_never_passed_counts_from_the_watchdogs_start_and_unwatched_loops_are_ignored(db, clock):
    dog = Watchdog(db, "r1", ["ticker", "watchdog"], {"recording": RecordingTransport()})
    beat(db, "old", "reconciler", clock.now() - timedelta(days=30))  # a loop no replica runs any more
    dog.run_once(clock.now())
    assert dog.last.stalled == []
    dog.run_once(clock.advance(181))
    assert dog.last.stalled == ["ticker"]  # not the watchdog itself, not the forgotten reconciler


def test_two_replicas_at_once_open_one_alert_and_send_each_message_once(db, clock):
    channels(db, clock)
    add_channel(db, clock.now(), tenant=None, name="platform-ticket", kind="recording", audience="engineering")
    recording = RecordingTransport()
    dogs = [Watchdog(db, f"r{i}", LOOPS, {"recording": recording}) for i in (1, 2)]
    start = clock.now()
    all_beat(db, start)
    for dog in dogs:
        dog.run_once(start)

    def race(at):
        gate = threading.Barrier(len(dogs))
        errors = []

        def run(dog):
            try:
                gate.wait(5)
                dog.run_once(at)
            except Exception as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(dog,)) for dog in dogs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []

    for seconds in (200, 205, 210):
        race(start + timedelta(seconds=seconds))
    alerts = platform_alerts(db)
    assert [(a[1], a[2]) for a in alerts] == [("notifier", "open"), ("poller", "open"), ("ticker", "open")]
    keys = [r.message.key for r in recording.messages]
    assert len(keys) == 6 and len(set(keys)) == 6  # three alerts × two platform channels, each once
    assert all(r.channel == "platform" for r in recording.messages)

    all_beat(db, start + timedelta(seconds=300), replica="r2")
    for seconds in (301, 302):
        race(start + timedelta(seconds=seconds))
    assert [a[2] for a in platform_alerts(db)] == ["resolved"] * 3
    keys = [r.message.key for r in recording.messages]
    assert len(keys) == 12 and len(set(keys)) == 12


def test_a_failed_delivery_is_retried_by_any_replica_and_not_sent_twice(db, clock):
    channels(db, clock)

    class Flaky:
        def __init__(self):
            self.sent: list[OutgoingMessage] = []
            self.fail = True

        def send(self, message: OutgoingMessage) -> Delivery:
            if self.fail:
                raise TransportError("provider unavailable")
            self.sent.append(message)
            return Delivery(message_id=message.key, thread_key=f"thread-{message.key}")

    flaky = Flaky()
    first = Watchdog(db, "r1", ["ticker"], {"recording": flaky}, base_backoff=30)
    second = Watchdog(db, "r2", ["ticker"], {"recording": flaky}, base_backoff=30)
    first.run_once(clock.now())
    second.run_once(clock.now())
    first.run_once(clock.advance(200))
    assert first.last.failed == 1 and flaky.sent == []
    flaky.fail = False
    second.run_once(clock.advance(10))  # still backing off
    assert flaky.sent == []
    second.run_once(clock.advance(60))
    first.run_once(clock.now())
    assert len(flaky.sent) == 1


class PingServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.hits: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                server.hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ping/abc-key"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def ping_server():
    server = PingServer()
    yield server
    server.stop()


def test_the_external_heartbeat_is_pinged_while_healthy_and_stops_when_a_loop_stalls(db, clock, ping_server):
    dog = Watchdog(db, "r1", ["ticker"], {}, ping_url=ping_server.url, ping_seconds=60,
                   environ={"TICKWARDEN_ALLOW_PRIVATE_URLS": "127.0.0.0/8"})
    start = clock.now()
    beat(db, "r1", "ticker", start)
    assert dog.run_once(start) <= start + timedelta(seconds=60)
    assert dog.last.pinged and ping_server.hits == ["/ping/abc-key"]
    dog.run_once(start + timedelta(seconds=30))  # not due yet
    assert len(ping_server.hits) == 1
    beat(db, "r1", "ticker", start + timedelta(seconds=60))
    dog.run_once(start + timedelta(seconds=61))
    assert len(ping_server.hits) == 2
    dog.run_once(start + timedelta(minutes=10))  # the ticker stalled: silence, so the outside notices
    assert dog.last.stalled == ["ticker"] and not dog.last.pinged and len(ping_server.hits) == 2


def test_the_outbound_policy_refuses_a_heartbeat_url_it_does_not_allow(db, clock, ping_server):
    dog = Watchdog(db, "r1", [], {}, ping_url=ping_server.url, environ={})  # loopback is not allowed here
    dog.run_once(clock.now())
    assert not dog.last.pinged and ping_server.hits == []


@pytest.mark.parametrize("value", ["ftp://monitor.example/x", "https://user:pw@monitor.example/x", "not a url",
                                   "https://monitor.example:99999/x"])
def test_a_malformed_heartbeat_url_is_one_clear_sentence(value):
    with pytest.raises(UsageError) as caught:
        heartbeat_url({HEARTBEAT_URL_ENV: value})
    assert caught.value.exit_code == 2 and HEARTBEAT_URL_ENV in caught.value.message
    assert "pw" not in caught.value.message


def test_no_heartbeat_url_means_no_ping():
    assert heartbeat_url({}) is None
    assert heartbeat_url({HEARTBEAT_URL_ENV: "https://hc.example/ping/k"}) == "https://hc.example/ping/k"


def test_in_the_service_a_hung_loop_is_reported_by_the_watchdog_of_the_same_replica(db, clock):
    """The real service: the poller's thread hangs in a pass; its heartbeat stops; the watchdog's does not."""
    channels(db, clock)
    release = threading.Event()

    class Hung:
        name = "poller"

        def run_once(self, now):
            release.wait(30)
            return now + timedelta(seconds=30)

    recording = RecordingTransport()
    dog = Watchdog(db, "r1", ["poller"], {"recording": recording})
    beat(db, "r1", "poller", clock.now())  # its last pass before it hung
    service = Service(db, [Hung(), dog], clock, "r1", listen=False)
    try:
        dog.run_once(clock.now())
        service.start()
        deadline = threading.Event()
        for _ in range(100):
            clock.advance(10)
            service.wake("watchdog")
            if recording.messages:
                break
            deadline.wait(0.05)
        assert [r.message.rendered.payload["platform_alert"]["loop"] for r in recording.messages] == ["poller"]
    finally:
        release.set()
        service.stop(10)


def test_serve_refuses_a_malformed_heartbeat_url_with_one_sentence_and_exit_2(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, HEARTBEAT_URL_ENV: "ftp://user:pw@monitor.example/ping", "TICKWARDEN_DATA_DIR": str(tmp_path),
           "TICKWARDEN_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    done = subprocess.run([sys.executable, "-m", "tickwarden", "serve", "--no-api"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"tickwarden: {HEARTBEAT_URL_ENV} must be an http:// or https:// URL with a host."


def test_each_platform_alert_is_its_own_webhook_thread_and_its_resolution_replies_in_it(db, clock):
    import json

    from tests.integration.fake_servers import WebhookFake
    from tickwarden.transports.webhook import WebhookTransport

    hook = WebhookFake().start()
    try:
        add_channel(db, clock.now(), tenant=None, name="platform-hook", kind="webhook", audience="engineering",
                    config={"url": hook.url})
        dog = Watchdog(db, "r1", ["ticker", "poller"], {"webhook": WebhookTransport(timeout=5)})
        dog.run_once(clock.now())
        dog.run_once(clock.advance(200))
        all_beat(db, clock.advance(1), loops=["ticker", "poller"])
        dog.run_once(clock.advance(1))
        bodies = [json.loads(r.body) for r in hook.requests]
    finally:
        hook.stop()
    threads = [(b["event"], b["platform_alert"]["loop"], b["thread"]) for b in bodies]
    ids = {b["platform_alert"]["loop"]: b["platform_alert"]["id"] for b in bodies}
    assert sorted(threads) == sorted([
        ("opened", "poller", f"platform-alert-{ids['poller']}"), ("opened", "ticker", f"platform-alert-{ids['ticker']}"),
        ("resolved", "poller", f"platform-alert-{ids['poller']}"),
        ("resolved", "ticker", f"platform-alert-{ids['ticker']}"),
    ])
    assert all(b["platform"] is True and b["tenant"] is None for b in bodies)


def test_an_idle_pass_is_one_read_only_statement_and_no_transaction(db, clock, counted):
    channels(db, clock)
    dog = Watchdog(db, "r1", LOOPS, {"recording": RecordingTransport()})
    all_beat(db, clock.now())
    counted.clear()
    dog.run_once(clock.advance(30))
    assert counted == [] and dog.last.stalled == []
    dog.run_once(clock.advance(200))  # a stall is work: it opens (and delivers) in transactions
    assert counted and len(dog.last.opened) == 3 and dog.last.sent == 3
    counted.clear()
    dog.run_once(clock.advance(30))  # still stalled, already open, nothing due: idle again
    assert counted == [] and dog.last.opened == [] and len(dog.last.stalled) == 3


def test_retention_removes_the_platforms_resolved_alerts_past_its_horizon_and_never_an_open_one(db, clock):
    from tickwarden.retention import DEFAULT_DAYS, RetentionSweeper

    channels(db, clock)
    recording = RecordingTransport()
    dog = Watchdog(db, "r1", LOOPS, {"recording": recording}, dashboard_url="https://tw.example")
    start = clock.now()
    all_beat(db, start)
    dog.run_once(start)
    # The ticker stalls and runs again: a resolved alert, both of its messages sent.
    all_beat(db, start + timedelta(minutes=2), loops=["poller", "notifier"])
    dog.run_once(start + timedelta(minutes=2, seconds=1))
    all_beat(db, start + timedelta(minutes=3))
    dog.run_once(start + timedelta(minutes=3, seconds=1))
    # Then the notifier stalls for good: an open alert.
    all_beat(db, start + timedelta(minutes=6), loops=["ticker", "poller"])
    dog.run_once(start + timedelta(minutes=6, seconds=1))
    assert [(a[1], a[2]) for a in platform_alerts(db)] == [("ticker", "resolved"), ("notifier", "open")]
    assert len(recording.messages) == 3

    sweeper = RetentionSweeper(db)
    sweeper.sweep(start + timedelta(days=DEFAULT_DAYS["alerts"] - 1))  # inside the horizon: kept
    assert len(platform_alerts(db)) == 2
    later = start + timedelta(days=DEFAULT_DAYS["alerts"] + 1)
    with db.connection() as conn:  # a message of it still waiting for a retry: kept until it is settled
        conn.execute("UPDATE platform_alert_deliveries SET status = 'failed'"
                     " WHERE event = 'resolved' AND alert_id = %s", (platform_alerts(db)[0][0],))
    assert sweeper.sweep(later).expired["alerts"] == 0 and len(platform_alerts(db)) == 2
    with db.connection() as conn:
        conn.execute("UPDATE platform_alert_deliveries SET status = 'dead' WHERE status = 'failed'")
    gone = sweeper.sweep(later)
    assert gone.expired["alerts"] == 1 + 2  # the alert and its two deliveries
    assert [(a[1], a[2]) for a in platform_alerts(db)] == [("notifier", "open")]
    with db.connection() as conn:
        left = conn.execute("SELECT count(*) FROM platform_alert_deliveries").fetchone()[0]
    assert left == 1  # the open alert's message
