from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwarden import profile as profile_module
from tickwarden.catalog import Budget
from tickwarden.errors import InvalidPolicy
from tickwarden.profile import BANDS, derive_profile, parse_overrides, run_deadline

SEVERITY_RANK = {"warning": 0, "critical": 1}


def test_five_minute_workflow_gets_the_patient_profile():
    profile = derive_profile(300)
    assert (profile.band, profile.retries, profile.alert_after, profile.first_severity) == ("frequent", 0, 3, "warning")


def test_hourly_workflow_gets_the_intermediate_profile():
    profile = derive_profile(3600)
    assert (profile.band, profile.retries, profile.alert_after, profile.first_severity) == ("hourly", 1, 2, "warning")


def test_daily_workflow_gets_the_urgent_profile():
    profile = derive_profile(86400)
    assert (profile.band, profile.retries, profile.alert_after, profile.first_severity) == ("daily", 3, 1, "critical")


def test_a_daily_schedule_shortened_by_dst_stays_daily():
    assert derive_profile(23 * 3600).band == "daily"
    assert derive_profile(25 * 3600).band == "daily"


@given(st.integers(min_value=1, max_value=400 * 86400), st.integers(min_value=1, max_value=400 * 86400))
def test_defaults_are_monotone_in_cadence(a, b):
    short, long = sorted((a, b))
    p, q = derive_profile(short), derive_profile(long)
    assert q.retries >= p.retries
    assert q.alert_after <= p.alert_after
    assert SEVERITY_RANK[q.first_severity] >= SEVERITY_RANK[p.first_severity]
    assert q.escalate_after <= p.escalate_after
    assert sum(q.backoffs()) >= sum(p.backoffs())


def test_bands_cover_every_cadence_in_order():
    bounds = [band.max_interval_seconds for band in BANDS]
    assert bounds == sorted(bounds)


def test_overrides_replace_defaults_and_are_reported():
    profile = derive_profile(300, {"retries": 2, "first_severity": "critical"})
    assert profile.retries == 2 and profile.first_severity == "critical"
    assert profile.overridden == ("first_severity", "retries")


def test_raising_the_threshold_keeps_escalation_beyond_it():
    profile = derive_profile(300, {"alert_after": 10})
    assert profile.escalate_after >= 10


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"retries": -1}, "retries"),
        ({"retries": 1000}, "retries"),
        ({"alert_after": 0}, "alert_after"),
        ({"first_severity": "apocalyptic"}, "first_severity"),
        ({"escalation_multiplier": 0}, "escalation_multiplier"),
        ({"retires": 1}, "Unknown policy field"),
        ({"alert_after": 5, "escalate_after": 2}, "escalate_after"),
        ({"backoff_seconds": [-1]}, "backoff_seconds"),
        ({"backoff_seconds": [90000]}, "backoff_seconds"),
        ({"backoff_seconds": "soon"}, "backoff_seconds"),
        ({"backoff_seconds": list(range(11))}, "backoff_seconds"),
    ],
)
def test_bad_overrides_are_rejected_with_one_sentence(raw, fragment):
    with pytest.raises(InvalidPolicy) as info:
        parse_overrides(raw)
    assert fragment in info.value.message


def test_escalation_deadline_uses_the_captured_cadence():
    opened = datetime(2026, 11, 30, 2, 20, tzinfo=UTC)
    profile = derive_profile(300)
    assert profile.escalate_at(opened) == opened + timedelta(minutes=30)
    assert profile.escalate_at(opened, cadence_seconds=600) == opened + timedelta(minutes=60)


def test_a_daily_workflow_backs_off_long_enough_to_ride_out_a_ten_minute_outage():
    profile = derive_profile(86400)
    assert profile.backoffs() == (60, 300, 900)
    assert sum(profile.backoffs()[:-1]) < 600 < sum(profile.backoffs())


def test_an_hourly_workflow_backs_off_less_than_a_daily_one():
    assert derive_profile(3600).backoffs() == (30,)
    assert derive_profile(3600).backoffs()[0] < derive_profile(86400).backoffs()[0]


def test_a_frequent_workflow_has_no_retry_to_back_off():
    assert derive_profile(300).backoffs() == ()


def test_the_last_backoff_repeats_for_extra_retries_and_none_means_at_once():
    assert derive_profile(86400, {"retries": 5}).backoffs() == (60, 300, 900, 900, 900)
    assert derive_profile(86400, {"retries": 2, "backoff_seconds": []}).backoffs() == (0, 0)
    overridden = derive_profile(3600, {"backoff_seconds": [10, 20], "retries": 2})
    assert overridden.backoffs() == (10, 20) and "backoff_seconds" in overridden.overridden


def test_run_deadline_leaves_room_for_every_attempt_and_backoff_but_no_poll():
    tick = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    deadline = run_deadline(tick, timeout_seconds=600, backoffs=(60, 300, 900), interval_seconds=86400)
    assert deadline == tick + timedelta(seconds=4 * 600 + 60 + 300 + 900 + 900)


def test_the_failure_rate_window_follows_the_cadence():
    windows = {band: derive_profile(seconds).rate_window
               for band, seconds in (("frequent", 300), ("hourly", 3600), ("intraday", 6 * 3600), ("daily", 86400))}
    assert windows == {"frequent": 12, "hourly": 8, "intraday": 0, "daily": 0}
    profile = derive_profile(300)
    assert (profile.rate_threshold, profile.rate_resolve_below) == (0.5, 0.25)


def test_the_failure_rate_rule_is_overridable_and_refuses_a_resolve_bound_above_the_threshold():
    profile = derive_profile(86400, {"rate_window": 10, "rate_threshold": 0.4})
    assert (profile.rate_window, profile.rate_threshold) == (10, 0.4)
    assert {"rate_window", "rate_threshold"} <= set(profile.overridden)
    with pytest.raises(InvalidPolicy, match="rate_resolve_below"):
        derive_profile(300, {"rate_threshold": 0.2, "rate_resolve_below": 0.3})
    with pytest.raises(InvalidPolicy, match="rate_window"):
        derive_profile(300, {"rate_window": 1})
    with pytest.raises(InvalidPolicy, match="rate_window"):
        derive_profile(300, {"rate_window": 101})


@given(timeout=st.integers(1, 7200), backoffs=st.lists(st.integers(0, 3600), max_size=6).map(tuple),
       interval=st.integers(1, 8 * 86400), minute=st.integers(0, 10**6))
def test_a_budget_gives_every_tick_the_run_deadline(timeout, backoffs, interval, minute):
    tick = datetime(2026, 11, 30, tzinfo=UTC) + timedelta(minutes=minute)
    budget = Budget(retries=len(backoffs), timeout_seconds=timeout, interval_seconds=interval, backoffs=backoffs)
    expected = run_deadline(tick, timeout_seconds=timeout, backoffs=backoffs, interval_seconds=interval)
    assert budget.deadline(tick) == expected
    assert budget.deadline(tick + timedelta(days=1)) == expected + timedelta(days=1)


def test_a_budget_computes_its_deadline_span_once(monkeypatch):
    """The simulator asks a shared budget for a deadline per attempt: the formula runs once per budget."""
    calls = []
    span = profile_module.run_deadline_span
    monkeypatch.setattr(profile_module, "run_deadline_span", lambda **kw: calls.append(kw) or span(**kw))
    budget = Budget(retries=1, timeout_seconds=600, interval_seconds=3600, backoffs=(60,))
    tick = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    deadlines = [budget.deadline(tick + timedelta(hours=h)) for h in range(5)]
    assert deadlines == [tick + timedelta(hours=h, seconds=2 * 600 + 60 + 900) for h in range(5)]
    assert len(calls) == 1
