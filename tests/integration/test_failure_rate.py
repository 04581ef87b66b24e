"""The failure-rate rule: a job failing every other tick alerts once, with reason `failure_rate`.

Each scenario runs the real pipeline (ticker, worker, poller, evaluator, notifier) on
a virtual clock against PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.dbutil import TEST_URL
from tickwarden.simulate import Simulation, parse_scenario

START = datetime.fromisoformat("2026-11-30T00:00:00+00:00")


def z(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def every_other_tick(first: datetime, ticks: int, step: int = 10) -> list[dict]:
    """Faults failing the attempt of every other */5 tick from `first` on."""
    return [
        {"workflow": "acme/sync", "start": z(first + timedelta(minutes=step * i)),
         "end": z(first + timedelta(minutes=step * i, seconds=60)), "error": "upstream 503", "retryable": True}
        for i in range(ticks)
    ]


def run(faults: list[dict], hours: float, policy: dict | None = None):
    raw = {
        "name": "flapping",
        "start": z(START),
        "end": z(START + timedelta(hours=hours)),
        "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": "sync", "cron": "*/5 * * * *", "duration": 30,
                       "policy": policy or {}}],
        "faults": faults,
    }
    return Simulation(parse_scenario(raw, source="test"), url=TEST_URL).run()


def statuses(outcome) -> list[str]:
    return [r["status"] for r in outcome.runs if not r["manual"]]


def test_it_opens_one_failure_rate_warning_for_a_job_failing_every_other_tick():
    outcome = run(every_other_tick(START, 36), hours=6)
    assert statuses(outcome).count("failed") >= 30, "the faults fail every other tick"
    assert len(outcome.alerts) == 1, "one state per workflow, not one alert per failure"
    alert = outcome.alerts[0]
    assert alert["reason"] == "failure_rate"
    assert alert["first_severity"] == "warning"
    # the window of 12 ticks is full and half failed one hour in: 00:00 … 00:55
    assert START + timedelta(minutes=55) <= alert["opened_at"] <= START + timedelta(minutes=60)
    opened = [n for n in outcome.notifications if n["event"] == "opened"]
    assert len(opened) == 2, "one opening per channel (the tenant's and the platform's)"


def test_it_keeps_the_alert_open_on_a_success_while_the_rate_stays_high():
    outcome = run(every_other_tick(START, 36), hours=6)
    alert = outcome.alerts[0]
    successes_after_opening = [r for r in outcome.runs
                               if r["status"] == "succeeded" and r["finished_at"] > alert["opened_at"]
                               and r["scheduled_for"] < START + timedelta(hours=5)]
    assert successes_after_opening, "the job succeeds every other tick while it flaps"
    assert alert["resolved_at"] is None or alert["resolved_at"] > START + timedelta(hours=6) - timedelta(minutes=1)
    assert not [n for n in outcome.notifications if n["event"] == "resolved"]


def test_it_resolves_once_the_rate_falls_under_the_lower_bound_not_on_the_first_success():
    # 12 flapping ticks (00:00 … 01:50), then healthy
    outcome = run(every_other_tick(START, 12), hours=4)
    alert = outcome.alerts[0]
    assert alert["reason"] == "failure_rate"
    last_failure = max(r["scheduled_for"] for r in outcome.runs if r["status"] == "failed")
    assert last_failure == START + timedelta(minutes=110)
    # the first success after the last failure is at 01:55; the window of 12 ticks holds
    # fewer than 3 failures (under 25 %) only from the tick of 02:30 on (01:35 … 02:30)
    assert alert["resolved_at"] is not None
    assert START + timedelta(hours=2, minutes=30) <= alert["resolved_at"] < START + timedelta(hours=2, minutes=35)
    assert len([n for n in outcome.notifications if n["event"] == "resolved"]) == 2


def test_it_stays_silent_when_only_a_few_ticks_fail():
    # one tick in four fails: 25 % is under the 50 % threshold
    outcome = run(every_other_tick(START, 12, step=20), hours=4)
    assert statuses(outcome).count("failed") >= 11, "the ticks inside the faults fail (the first tick is the start)"
    assert outcome.alerts == []


def test_a_streak_alert_says_it_opened_on_consecutive_failures():
    fault = {"workflow": "acme/sync", "start": z(START), "end": z(START + timedelta(minutes=20)),
             "error": "upstream 503"}
    outcome = run([fault], hours=1)
    assert [a["reason"] for a in outcome.alerts] == ["consecutive_failures"]
    assert outcome.alerts[0]["resolved_at"] is not None, "a streak alert still resolves on the next success"


def test_it_never_rates_when_the_window_is_overridden_to_zero():
    outcome = run(every_other_tick(START, 18), hours=3, policy={"rate_window": 0})
    assert outcome.alerts == []
