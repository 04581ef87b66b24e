"""`tickwarden simulate --json` for the alerting rules beside the streak (real CLI, real PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.test_simulate import simulate

HERE = Path(__file__).parent / "scenarios"


def test_every_alert_of_simulate_json_says_which_rule_opened_it():
    result = simulate(HERE / "flapping.yaml")
    reasons = {a["workflow"]: a["reason"] for a in result["alerts"]}
    assert reasons == {"flapping-sync": "failure_rate", "broken-sync": "consecutive_failures"}
    flapping = next(a for a in result["alerts"] if a["workflow"] == "flapping-sync")
    # the first tick is 00:05: the window of 12 ticks is full, and half of it failed, at 01:00
    assert (flapping["first_severity"], flapping["opened_at"]) == ("warning", "2026-11-30T01:00:00Z")
    # still flapping 6 × cadence later: the escalation clock runs as for any warning
    assert "2026-11-30T01:30:00Z" <= flapping["escalated_at"] < "2026-11-30T01:32:00Z"
    assert flapping["resolved_at"] is not None and flapping["resolved_at"] >= "2026-11-30T02:30:00Z"
    events = [n["event"] for n in result["notifications"] if n["alert"] == flapping["id"]]
    assert sorted(events) == ["escalated", "escalated", "opened", "opened", "resolved", "resolved"]
