"""Maintenance windows: which instants a one-off or recurring window covers, and time outside them."""

from datetime import UTC, datetime, timedelta

import pytest

from tickwarden.errors import InvalidInput
from tickwarden.holds import choose_release
from tickwarden.maintenance import Window, covered_until, deadline_outside, parse_duration, window_spec
from tickwarden.store.maintenance import HeldRow

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def window(*, start=None, end=None, cron=None, tz=None, duration=None, workflow_id=1) -> Window:
    return Window(id=1, tenant_id=1, tenant="acme", workflow_id=workflow_id, workflow="nightly", source="api",
                  starts_at=start, ends_at=end, cron=cron, timezone=tz, duration_seconds=duration, note=None,
                  created_by="t", created_at=T0)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_a_one_off_window_covers_its_start_and_not_its_end():
    w = window(start=at("2026-12-01T01:00:00+00:00"), end=at("2026-12-01T03:00:00+00:00"))
    assert w.span_at(at("2026-12-01T00:59:59+00:00")) is None
    assert w.span_at(at("2026-12-01T01:00:00+00:00")) is not None
    assert w.span_at(at("2026-12-01T02:59:59+00:00")) is not None
    assert w.span_at(at("2026-12-01T03:00:00+00:00")) is None


def test_a_recurring_window_covers_each_occurrence_for_its_duration():
    w = window(cron="0 1 * * *", tz="UTC", duration=2 * 3600)
    assert w.span_at(at("2026-12-05T01:30:00+00:00")) == (at("2026-12-05T01:00:00+00:00"),
                                                           at("2026-12-05T03:00:00+00:00"))
    assert w.span_at(at("2026-12-05T03:00:00+00:00")) is None
    assert w.span_at(at("2026-12-05T00:59:00+00:00")) is None


def test_a_recurring_window_is_read_in_its_own_timezone():
    w = window(cron="0 1 * * *", tz="Europe/Berlin", duration=3600)  # 01:00 Berlin = 00:00 UTC in winter
    assert w.span_at(at("2026-12-05T00:30:00+00:00")) is not None
    assert w.span_at(at("2026-12-05T01:30:00+00:00")) is None


def test_a_window_across_the_spring_forward_gap_opens_after_the_gap_and_lasts_its_elapsed_duration():
    # 2027-03-28: Berlin skips 02:00–03:00. A 02:30 start opens at 03:00 local (01:00 UTC).
    w = window(cron="30 2 * * *", tz="Europe/Berlin", duration=3600)
    assert w.span_at(at("2027-03-28T00:45:00+00:00")) is None
    span = w.span_at(at("2027-03-28T01:30:00+00:00"))
    assert span is not None and span[1] - span[0] == timedelta(hours=1)
    assert span[0] == at("2027-03-28T01:00:00+00:00")


def test_a_window_across_the_fall_back_hour_opens_once():
    # 2026-10-25: Berlin repeats 02:00–03:00. A 02:30 start opens once (the first 02:30, 00:30 UTC).
    w = window(cron="30 2 * * *", tz="Europe/Berlin", duration=30 * 60)
    assert w.span_at(at("2026-10-25T00:40:00+00:00")) is not None
    assert w.span_at(at("2026-10-25T01:40:00+00:00")) is None


def test_chained_windows_merge_into_one_span():
    first = window(start=at("2026-12-01T01:00:00+00:00"), end=at("2026-12-01T02:00:00+00:00"))
    second = window(start=at("2026-12-01T02:00:00+00:00"), end=at("2026-12-01T04:00:00+00:00"))
    assert covered_until([first, second], at("2026-12-01T01:10:00+00:00")) == at("2026-12-01T04:00:00+00:00")
    assert covered_until([first, second], at("2026-12-01T04:00:00+00:00")) is None


def test_time_outside_windows_skips_the_maintenance():
    w = window(start=at("2026-12-01T01:00:00+00:00"), end=at("2026-12-01T03:00:00+00:00"))
    # opened at 00:30 with one hour to run: 30 minutes before the window, 30 after it
    assert deadline_outside([w], at("2026-12-01T00:30:00+00:00"), timedelta(hours=1)) == at("2026-12-01T03:30:00+00:00")
    # opened inside: the clock starts when the window ends
    assert deadline_outside([w], at("2026-12-01T02:00:00+00:00"), timedelta(hours=1)) == at("2026-12-01T04:00:00+00:00")
    # no window in the way
    assert deadline_outside([w], at("2026-12-01T04:00:00+00:00"), timedelta(hours=1)) == at("2026-12-01T05:00:00+00:00")


def test_time_outside_a_recurring_window_counts_every_occurrence():
    w = window(cron="0 * * * *", tz="UTC", duration=30 * 60)  # the first half of every hour
    assert deadline_outside([w], at("2026-12-01T00:30:00+00:00"), timedelta(hours=1)) == at("2026-12-01T02:00:00+00:00")


def test_a_window_covering_all_time_cannot_hold_escalation_forever():
    w = window(cron="* * * * *", tz="UTC", duration=3600)
    due = deadline_outside([w], T0, timedelta(minutes=5))
    assert T0 < due <= T0 + timedelta(days=63)


@pytest.mark.parametrize(("value", "seconds"), [("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1d", 86400),
                                                (600, 600), ("90", 90)])
def test_durations_read_as_people_write_them(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"start": "2026-12-01T03:00:00Z", "end": "2026-12-01T01:00:00Z"}, "end must be after"),
    ({"start": "2026-12-01T01:00:00", "end": "2026-12-01T03:00:00Z"}, "UTC offset"),
    ({"start": "tomorrow", "end": "2026-12-01T03:00:00Z"}, "is not a time"),
    ({"start": "2026-12-01T01:00:00Z"}, "needs both"),
    ({"cron": "0 1 * * *"}, "needs a start and an end, or a cron"),
    ({"cron": "61 1 * * *", "duration": "1h"}, "cron"),
    ({"cron": "0 1 * * *", "duration": "1h", "timezone": "Mars/Olympus"}, "cron"),
    ({"cron": "0 1 * * *", "duration": "forever"}, "not a length of time"),
    ({"cron": "0 1 * * *", "duration": "8d"}, "too long"),
    ({"cron": "0 1 * * *", "duration": "10s"}, "at least one minute"),
    ({"start": "2026-12-01T01:00:00Z", "end": "2026-12-01T03:00:00Z", "cron": "0 1 * * *"}, "not both"),
    ({"start": "2026-12-01T01:00:00Z", "end": "2027-02-01T03:00:00Z"}, "pause the workflow"),
])
def test_a_bad_window_is_one_sentence(kwargs, fragment):
    with pytest.raises(InvalidInput) as caught:
        window_spec(**kwargs)
    assert fragment in caught.value.message and "\n" not in caught.value.message


def test_a_good_window_is_normalised_to_utc():
    spec = window_spec(start="2026-12-01T02:00:00+01:00", end="2026-12-01T03:00:00Z")
    assert spec.starts_at == at("2026-12-01T01:00:00+00:00")
    recurring = window_spec(cron="0 1 * * 6", duration="2h", timezone="Europe/Berlin")
    assert (recurring.cron, recurring.timezone, recurring.duration_seconds) == ("0 1 * * 6", "Europe/Berlin", 7200)


def held(i, kind, heard=False):
    return HeldRow(id=i, alert_id=1, channel_id=1, event_id=i, kind=kind, heard=heard)


def test_the_release_sends_the_current_severity_once_and_nothing_for_an_alert_that_came_and_went():
    assert choose_release([held(1, "opened"), held(2, "escalated"), held(3, "noted")], "open") == 2
    assert choose_release([held(1, "opened"), held(2, "reassigned")], "open") == 1
    assert choose_release([held(1, "opened"), held(2, "resolved")], "resolved") is None
    assert choose_release([held(1, "escalated", True), held(2, "resolved", True)], "resolved") == 2
    assert choose_release([held(1, "noted", True)], "open") == 1
