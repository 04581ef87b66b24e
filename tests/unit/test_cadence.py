from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwarden import cadence as cadence_module
from tickwarden.cadence import cadence_of, parse_schedule
from tickwarden.errors import InvalidSchedule

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_it_fires_every_five_minutes_regularly():
    cadence = cadence_of(parse_schedule("*/5 * * * *"), NOW)
    assert cadence.interval_seconds == 300
    assert cadence.regular


def test_weekdays_at_nine_summarise_as_daily_by_median():
    cadence = cadence_of(parse_schedule("0 9 * * 1-5", "Europe/Berlin"), NOW)
    assert cadence.interval_seconds == 86400
    assert not cadence.regular
    assert "median" in cadence.summary


def test_macros_are_understood():
    assert cadence_of(parse_schedule("@hourly"), NOW).interval_seconds == 3600
    assert cadence_of(parse_schedule("@weekly"), NOW).interval_seconds == 7 * 86400


def test_berlin_spring_forward_fires_once_at_the_first_valid_minute():
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    fires = list(schedule.fires_between(datetime(2026, 3, 28, 0, 0, tzinfo=UTC), datetime(2026, 3, 31, 0, 0, tzinfo=UTC)))
    # 02:30 CET on the 28th, 02:30 does not exist on the 29th (fires 03:00 CEST), 02:30 CEST on the 30th
    assert fires == [
        datetime(2026, 3, 28, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]


def test_berlin_fall_back_fires_the_repeated_hour_once():
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    fires = list(schedule.fires_between(datetime(2026, 10, 24, 0, 0, tzinfo=UTC), datetime(2026, 10, 27, 0, 0, tzinfo=UTC)))
    assert fires == [
        datetime(2026, 10, 24, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),
    ]


def test_new_york_spring_forward_keeps_a_daily_cadence():
    schedule = parse_schedule("30 2 * * *", "America/New_York")
    fires = list(schedule.fires_between(datetime(2026, 3, 7, 12, 0, tzinfo=UTC), datetime(2026, 3, 10, 12, 0, tzinfo=UTC)))
    assert len(fires) == 3  # the 8th has no 02:30 but still fires once
    assert fires[0] == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 03:00 EDT
    cadence = cadence_of(schedule, datetime(2026, 3, 1, tzinfo=UTC))
    assert cadence.interval_seconds == 86400 and cadence.regular


def test_new_york_fall_back_hourly_job_does_not_double_fire():
    schedule = parse_schedule("15 1 * * *", "America/New_York")
    fires = list(schedule.fires_between(datetime(2026, 10, 31, 12, tzinfo=UTC), datetime(2026, 11, 2, 12, tzinfo=UTC)))
    assert len(fires) == 2


@pytest.mark.parametrize(
    ("cron", "tz", "fragment"),
    [
        ("0 2 30 2 *", "UTC", "day-of-month"),
        ("61 * * * *", "UTC", "minute"),
        ("* * * *", "UTC", "4 fields"),
        ("", "UTC", "empty"),
        ("0 2 * * *", "Mars/Olympus", "Unknown timezone"),
        ("0 2 * * *", "../../etc/passwd", "Unknown timezone"),
    ],
)
def test_bad_schedules_get_one_clear_sentence(cron, tz, fragment):
    with pytest.raises(InvalidSchedule) as info:
        parse_schedule(cron, tz)
    assert fragment in info.value.message
    assert "\n" not in info.value.message


def test_leap_day_schedule_has_a_four_year_cadence():
    cadence = cadence_of(parse_schedule("0 0 29 2 *"), NOW)
    assert cadence.interval_seconds >= 4 * 365 * 86400


minutes = st.sampled_from(["*", "*/5", "*/15", "0", "30", "0,30", "10-20"])
hours = st.sampled_from(["*", "*/2", "0", "2", "9-17", "1,13"])
days = st.sampled_from(["*", "1", "15", "1-7"])
weekdays = st.sampled_from(["*", "1-5", "0", "6"])
zones = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"])


@settings(max_examples=60, deadline=None)
@given(minutes, hours, days, weekdays, zones, st.integers(min_value=0, max_value=3 * 365 * 24))
def test_fire_times_strictly_increase(minute, hour, day, weekday, zone, offset_hours):
    schedule = parse_schedule(f"{minute} {hour} {day} * {weekday}", zone)
    start = datetime(2025, 1, 1, tzinfo=UTC).timestamp() + offset_hours * 3600
    after = datetime.fromtimestamp(start, UTC)
    previous = after
    for index, fire in enumerate(schedule.fire_times(after)):
        assert fire > previous
        assert fire.utcoffset().total_seconds() == 0
        previous = fire
        if index == 40:
            break


def _cadence_or_error(cron: str, zone: str, now: datetime) -> object:
    try:
        return cadence_of(parse_schedule(cron, zone), now)
    except InvalidSchedule as exc:
        return exc.message


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=0, max_value=59), st.sampled_from(["*", "*/6", "9-17", "0", "3", "23"]),
       st.sampled_from(["*", "1", "29", "31", "1-7", "L"]), st.sampled_from(["*", "2", "*/3"]),
       st.sampled_from(["*", "1-5", "0", "1#2"]), st.integers(min_value=0, max_value=4 * 366 * 24 * 60))
def test_a_utc_schedule_at_a_fixed_minute_has_the_cadence_of_its_own_walk(minute, hour, day, month, weekday, offset):
    # In UTC the cadence is read off the schedule's shape at the top of the hour or day;
    # Etc/UTC has the same offsets and walks the expression itself.
    cron = f"{minute} {hour} {day} {month} {weekday}"
    now = NOW + timedelta(minutes=offset)
    assert _cadence_or_error(cron, "UTC", now) == _cadence_or_error(cron, "Etc/UTC", now)


def test_schedules_of_one_shape_share_the_summary_of_its_fires():
    # Sixty hourly schedules at sixty minutes sample two stretches of `0 * * * *`'s fires
    # (the top of the hour `now` falls on, and the next): two summaries, not sixty.
    now = datetime(2031, 5, 6, 7, 0, tzinfo=UTC)
    cadence_module._shape_cadence.cache_clear()
    cadences = {cadence_of(parse_schedule(f"{minute} * * * *"), now) for minute in range(60)}
    assert cadences == {cadence_of(parse_schedule("0 * * * *", "Etc/UTC"), now)}
    assert cadence_module._shape_cadence.cache_info().misses == 2


def test_a_schedule_is_parsed_once_and_a_bad_one_fails_every_time():
    assert parse_schedule("7 3 * * 1", "Europe/Berlin") is parse_schedule("7 3 * * 1", "Europe/Berlin")
    for _ in range(2):
        with pytest.raises(InvalidSchedule, match="Unknown timezone"):
            parse_schedule("0 2 * * *", ["Europe/Berlin"])  # type: ignore[arg-type]  # unhashable: no TypeError
        with pytest.raises(InvalidSchedule, match="minute"):
            parse_schedule("61 * * * *")
