from datetime import UTC, datetime, timedelta

from tickwarden.metrics import loop_statuses
from tickwarden.models import Heartbeat

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def beat(loop, replica, ago, interval=30, next_pass=True):
    last = NOW - timedelta(seconds=ago)
    return Heartbeat(replica_id=replica, loop=loop, last_pass_at=last, last_duration_ms=1.0, passes=1,
                     last_error=None, next_pass_at=last + timedelta(seconds=interval) if next_pass else None)


def test_a_loop_is_alive_while_any_replica_passes_on_time():
    [status] = loop_statuses([beat("poller", "a", 3600), beat("poller", "b", 10)], NOW)
    assert not status.stalled and status.replicas == 2 and status.replica_id == "b"


def test_a_loop_is_stalled_when_its_newest_pass_is_three_intervals_old():
    # every 30 s: due 30 s after the pass, plus a grace of max(60 s, 2 × 30 s)
    assert not loop_statuses([beat("poller", "a", 90)], NOW)[0].stalled
    assert loop_statuses([beat("poller", "a", 91)], NOW)[0].stalled


def test_a_loop_that_said_it_sleeps_long_gets_its_sleep_and_twice_more():
    hourly = beat("ticker", "a", 3 * 3600 - 1, interval=3600)
    assert not loop_statuses([hourly], NOW)[0].stalled
    assert loop_statuses([beat("ticker", "a", 3 * 3600 + 1, interval=3600)], NOW)[0].stalled


def test_without_a_next_pass_a_minute_is_assumed():
    assert not loop_statuses([beat("reaper", "a", 179, next_pass=False)], NOW)[0].stalled
    assert loop_statuses([beat("reaper", "a", 181, next_pass=False)], NOW)[0].stalled


def test_loops_are_reported_separately_and_in_name_order():
    statuses = loop_statuses([beat("poller", "a", 5), beat("escalation", "a", 900)], NOW)
    assert [(s.loop, s.stalled) for s in statuses] == [("escalation", True), ("poller", False)]
