"""An intermittent incident of the noise benchmark: the failure-rate rule catches it, the streak alone does not."""

from __future__ import annotations

import random
from datetime import timedelta

from benchmarks.noise import INTERMITTENT_ERROR, intermittent
from tests.dbutil import TEST_URL
from tickwarden.cadence import parse_schedule
from tickwarden.clock import isoformat_z, parse_utc
from tickwarden.simulate import parse_scenario, run_policy

START = parse_utc("2026-11-30T00:00:00Z")


def scenario():
    cron = "3-59/10 * * * *"
    flaky = intermittent("acme/sync", parse_schedule(cron), START + timedelta(minutes=30), 2, random.Random(11))
    assert flaky is not None
    windows, incident = flaky
    raw = {
        "name": "intermittent",
        "start": isoformat_z(START),
        "end": isoformat_z(incident.end + timedelta(hours=2)),
        "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": "sync", "cron": cron, "duration": 40}],
        "faults": [{"workflow": "acme/sync", "start": isoformat_z(a), "end": isoformat_z(b),
                    "error": INTERMITTENT_ERROR} for a, b in windows],
    }
    return parse_scenario(raw, source="test"), incident


def test_tickwarden_alerts_on_an_intermittent_incident_and_the_streak_only_policy_does_not():
    plan, incident = scenario()
    ours = run_policy(plan, "tickwarden", url=TEST_URL)
    failed = [r for r in ours.runs if r["status"] == "failed"]
    assert len(failed) >= 6, "most ticks of the incident fail"
    assert [a["reason"] for a in ours.alerts] == ["failure_rate"]
    assert incident.start <= ours.alerts[0]["opened_at"] <= incident.end
    before = run_policy(plan, "streak-only", url=TEST_URL)
    assert [r["status"] for r in before.runs] == [r["status"] for r in ours.runs], "the same ticks fail"
    assert before.alerts == [], "never enough failures in a row for the streak"


def test_the_streak_only_policy_keeps_each_workflows_own_policy():
    raw = {
        "name": "own policy",
        "start": isoformat_z(START),
        "end": isoformat_z(START + timedelta(minutes=40)),
        "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": "sync", "cron": "*/5 * * * *", "duration": 30,
                       "policy": {"alert_after": 1}}],
        "faults": [{"workflow": "acme/sync", "start": isoformat_z(START + timedelta(minutes=10)),
                    "end": isoformat_z(START + timedelta(minutes=10, seconds=5)), "error": "KeyError: 'id'"}],
    }
    outcome = run_policy(parse_scenario(raw, source="test"), "streak-only", url=TEST_URL)
    assert len(outcome.alerts) == 1, "alert_after: 1 of the workflow still holds; only rate_window is switched off"
