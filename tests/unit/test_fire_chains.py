"""The remembered fire-time chains answer exactly what a fresh cronsim walk would."""

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwarden import cadence
from tickwarden.cadence import _FireChains, parse_schedule

minutes = st.sampled_from(["*", "*/5", "*/15", "0", "30", "0,30", "10-20"])
hours = st.sampled_from(["*", "*/2", "0", "1", "2", "3", "9-17", "1,13"])
days = st.sampled_from(["*", "1", "15", "1-7", "29"])
weekdays = st.sampled_from(["*", "1-5", "0", "6"])
zones = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago"])
BASE = datetime(2025, 1, 1, tzinfo=UTC)


def fresh_next(schedule, instant):
    return next(schedule.walk(instant), None)


@pytest.fixture
def small_chains(monkeypatch):
    """Chains small enough that trimming, far-ahead restarts and eviction all happen."""
    chains = _FireChains()
    monkeypatch.setattr(chains, "MAX_FIRES", 8)
    monkeypatch.setattr(chains, "MAX_EXTEND", 5)
    monkeypatch.setattr(chains, "MAX_CHAINS", 2)
    return chains


@settings(max_examples=80, deadline=None)
@given(minutes, hours, days, weekdays, zones,
       st.lists(st.integers(min_value=0, max_value=2 * 365 * 24 * 60), min_size=1, max_size=40))
def test_any_order_of_questions_gets_the_fresh_walks_answers(minute, hour, day, weekday, zone, offsets):
    schedule = parse_schedule(f"{minute} {hour} {day} * {weekday}", zone)
    chains = _FireChains()
    chains.MAX_FIRES, chains.MAX_EXTEND = 16, 6
    for offset in offsets:
        instant = BASE + timedelta(minutes=offset, seconds=offset % 7)
        assert chains.next_after(schedule, instant) == fresh_next(schedule, instant)


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("cron", ["30 2 * * *", "15 1,2,3 * * *", "*/20 * * * *", "0 * * * *"])
def test_a_year_of_dst_transitions_walks_like_cronsim(cron, zone, small_chains):
    schedule = parse_schedule(cron, zone)
    expected = list(itertools.islice(schedule.walk(BASE), 1500))
    got, instant = [], BASE
    for _ in expected:
        instant = small_chains.next_after(schedule, instant)
        got.append(instant)
    assert got == expected
    # and halfway between any two fires, the later one
    for earlier, later in zip(expected[::37], expected[1::37], strict=False):
        assert small_chains.next_after(schedule, earlier + (later - earlier) / 2) == later


def test_chains_of_many_schedules_evict_without_mixing_them_up(small_chains):
    schedules = [parse_schedule(f"{m} * * * *") for m in (5, 17, 43)]
    for round_ in range(4):
        for schedule in schedules:
            instant = BASE + timedelta(hours=round_)
            assert small_chains.next_after(schedule, instant) == fresh_next(schedule, instant)
    assert len(small_chains._chains) <= 2


def test_a_leap_day_schedule_jumps_years_ahead_and_back(small_chains):
    schedule = parse_schedule("0 0 29 2 *")
    for year in (2096, 2101, 2030, 2400, 2099):
        instant = datetime(year, 3, 1, tzinfo=UTC)
        assert small_chains.next_after(schedule, instant) == fresh_next(schedule, instant)


def test_fire_times_come_from_the_shared_chain_and_agree_with_a_walk():
    schedule = parse_schedule("7 */3 * * *", "America/New_York")
    assert list(itertools.islice(schedule.fire_times(BASE), 50)) == list(itertools.islice(schedule.walk(BASE), 50))


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "Australia/Lord_Howe"])
def test_fire_times_taken_a_batch_at_a_time_agree_with_a_walk_across_trims_and_restarts(zone, small_chains, monkeypatch):
    schedule = parse_schedule("*/20 1-3 * * *", zone)
    monkeypatch.setattr("tickwarden.cadence._CHAINS", small_chains)
    monkeypatch.setattr(small_chains, "BATCH", 3)
    for start in (BASE, BASE + timedelta(days=90, minutes=7), BASE + timedelta(days=30)):
        assert list(itertools.islice(schedule.fire_times(start), 200)) == list(itertools.islice(schedule.walk(start), 200))


def test_following_hands_out_several_fires_with_one_lookup():
    schedule = parse_schedule("*/5 * * * *")
    chains = _FireChains()
    for _ in range(20):
        chains.next_after(schedule, BASE + timedelta(minutes=5 * _))  # the chain holds 20 fires
    assert chains.following(schedule, BASE) == [BASE + timedelta(minutes=5 * k) for k in range(1, 17)]
    assert chains.following(schedule, BASE + timedelta(minutes=96)) == [BASE + timedelta(minutes=100)]  # its last
    assert chains.following(schedule, BASE + timedelta(minutes=100)) == [BASE + timedelta(minutes=105)]  # extended


@settings(max_examples=120, deadline=None)
@given(minutes, hours, days, st.sampled_from(["*", "2", "1-6", "2,8"]), weekdays,
       st.integers(min_value=0, max_value=3 * 365 * 24 * 3600), st.sampled_from([0, 1, 999_999]))
def test_a_utc_schedule_walks_the_fires_of_a_walk_in_the_utc_zone(minute, hour, day, month, weekday, offset, micros):
    """`walk` takes cronsim's UTC path for a UTC schedule: the fires of a walk under `ZoneInfo("UTC")`, aware UTC."""
    expression = f"{minute} {hour} {day} {month} {weekday}"
    after = BASE + timedelta(seconds=offset, microseconds=micros)
    in_zone = [fire.astimezone(UTC) for fire in itertools.islice(CronSim(expression, after.astimezone(ZoneInfo("UTC"))), 20)]
    walked = list(itertools.islice(parse_schedule(expression, "UTC").walk(after), 20))
    assert walked == in_zone and all(fire.tzinfo is UTC for fire in walked)


def test_a_utc_schedule_is_walked_in_utc_and_a_zones_in_its_zone(monkeypatch):
    started: list[datetime] = []

    def recording(expression: str, dt: datetime) -> CronSim:
        started.append(dt)
        return CronSim(expression, dt)

    utc, zoned = parse_schedule("30 2 * * *", "UTC"), parse_schedule("30 2 * * *", "Europe/Berlin")
    monkeypatch.setattr(cadence, "CronSim", recording)
    assert next(utc.walk(BASE)) == BASE + timedelta(hours=2, minutes=30)
    berlin = next(zoned.walk(BASE))
    assert berlin == BASE + timedelta(hours=1, minutes=30) and berlin.tzinfo is UTC
    assert [dt.tzinfo for dt in started] == [UTC, ZoneInfo("Europe/Berlin")]
