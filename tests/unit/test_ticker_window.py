"""Which ticks a ticker pass fires: the starting deadline, and the next tick, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwarden.cadence import parse_schedule
from tickwarden.ticker import compute_window

EVERY_MINUTE = parse_schedule("* * * * *")


def at(h: int, m: int, s: int = 0) -> datetime:
    return datetime(2026, 11, 30, h, m, s, tzinfo=UTC)


def test_a_due_tick_fires_and_the_entry_moves_to_the_next_one():
    window = compute_window(EVERY_MINUTE, at(12, 1), at(12, 1, 2) - timedelta(seconds=300), at(12, 1, 2))
    assert window.fire == (at(12, 1),) and window.next_fire_at == at(12, 2) and window.stale == 0


def test_ticks_within_the_deadline_fire_late_and_older_ones_are_counted_stale():
    now = at(12, 30, 10)
    window = compute_window(EVERY_MINUTE, at(12, 2), now - timedelta(seconds=120), now)
    assert window.fire == (at(12, 29), at(12, 30)) and window.stale == 27 and window.next_fire_at == at(12, 31)


def test_a_long_outage_costs_no_burst():
    now = at(12, 0, 30) + timedelta(days=1)
    window = compute_window(EVERY_MINUTE, at(12, 0), now - timedelta(seconds=60), now)
    assert window.fire == (at(12, 0) + timedelta(days=1),)


def test_spring_forward_fires_a_skipped_local_time_once_at_the_first_valid_minute():
    berlin = parse_schedule("30 2 * * *", "Europe/Berlin")
    # 2027-03-28: 02:00 local jumps to 03:00; 02:30 does not exist
    start = datetime(2027, 3, 27, 1, 30, tzinfo=UTC) + timedelta(minutes=1)   # just after the 27th's fire
    now = datetime(2027, 3, 28, 1, 0, 30, tzinfo=UTC)
    window = compute_window(berlin, start, now - timedelta(hours=1), now)
    # 03:00 CEST is 01:00 UTC; the next fire is 02:30 CEST on the 29th (00:30 UTC)
    assert window.fire == (datetime(2027, 3, 28, 1, 0, tzinfo=UTC),)
    assert window.next_fire_at == datetime(2027, 3, 29, 0, 30, tzinfo=UTC)
