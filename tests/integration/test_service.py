"""The service: loops in threads on the wall clock, heartbeats, surviving failing passes, waking early."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from tickwarden.clock import WallClock
from tickwarden.service import Service, build_loops
from tickwarden.ticker import Ticker


class Counting:
    def __init__(self, name: str, every: float = 0.05, fail_on: set[int] | None = None):
        self.name = name
        self.every = every
        self.fail_on = fail_on or set()
        self.calls = 0
        self.passed = threading.Event()

    def run_once(self, now: datetime) -> datetime:
        self.calls += 1
        self.passed.set()
        if self.calls in self.fail_on:
            raise RuntimeError("password=hunter2 connection refused")
        return now + timedelta(seconds=self.every)


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_it_runs_each_loop_and_records_every_pass(db):
    loops = [Counting("alpha"), Counting("beta", every=0.1)]
    service = Service(db, loops, WallClock(), "replica-1", listen=False)
    service.start()
    wait_for(lambda: all(loop.calls >= 3 for loop in loops))
    service.stop()
    with db.transaction() as store:
        beats = {b.loop: b for b in store.heartbeat.list_heartbeats()}
    assert set(beats) == {"alpha", "beta"}
    for loop in loops:
        beat = beats[loop.name]
        assert beat.replica_id == "replica-1" and beat.passes == loop.calls and beat.last_error is None
        assert beat.next_pass_at > beat.last_pass_at


def test_a_failing_pass_is_logged_on_one_sanitized_line_and_the_loop_carries_on(db, caplog, monkeypatch):
    monkeypatch.setattr("tickwarden.service.ERROR_BACKOFF", timedelta(milliseconds=50))
    flaky = Counting("flaky", fail_on={1})
    service = Service(db, [flaky], WallClock(), "replica-1", listen=False)
    with caplog.at_level(logging.ERROR, logger="tickwarden.service"):
        service.start()
        wait_for(lambda: flaky.calls >= 3)
        service.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "tickwarden.service"]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "RuntimeError" in lines[0] and "hunter2" not in lines[0]


def test_the_heartbeat_keeps_the_error_of_the_last_pass_only(db):
    flaky = Counting("flaky", fail_on={1})
    service = Service(db, [flaky], WallClock(), "replica-1", listen=False)
    state = service.states["flaky"]
    service.run_pass(state)
    with db.transaction() as store:
        first = store.heartbeat.list_heartbeats()[0]
    service.run_pass(state)
    with db.transaction() as store:
        second = store.heartbeat.list_heartbeats()[0]
    assert "RuntimeError" in first.last_error and "hunter2" not in first.last_error
    assert second.last_error is None and second.passes == 2


def test_a_notification_wakes_a_sleeping_loop_early(db):
    sleepy = Counting("sleepy", every=3600)
    service = Service(db, [sleepy], WallClock(), "replica-1", listen=True)
    service.start()
    wait_for(lambda: sleepy.calls == 1)
    # A notification sent before the listener has connected is simply not seen, and how
    # long connecting takes depends on the machine: keep notifying until one lands. The
    # loop would otherwise sleep for an hour.
    deadline = time.monotonic() + 20
    while sleepy.calls < 2:
        assert time.monotonic() < deadline, "no notification woke the loop"
        with db.transaction() as store:
            store.trigger.notify_wake("sleepy")
        time.sleep(0.2)
    service.stop()


def test_stop_returns_promptly_even_when_loops_sleep_for_long(db):
    service = Service(db, [Counting("sleepy", every=3600)], WallClock(), "replica-1", listen=False)
    service.start()
    time.sleep(0.1)
    started = time.monotonic()
    service.stop()
    assert time.monotonic() - started < 2


def test_build_loops_gives_every_loop_of_the_pipeline_once_and_no_reconciler_for_the_builtin_trigger(db):
    loops = build_loops(db, "replica-1")
    assert [loop.name for loop in loops] == [
        "ticker", "lease-reaper", "poller", "deadlines", "escalation", "notifier", "retention", "watchdog",
    ]
    assert isinstance(loops[0], Ticker)
