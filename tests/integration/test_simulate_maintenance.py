"""Scenario `maintenance:` through the simulator: the real loops hold deliveries, and `simulate --json`
stays in its contract (events opened, escalated, reassigned, resolved; one thread per alert and channel)."""

from __future__ import annotations

from tests.dbutil import TEST_URL
from tickwarden.simulate import Simulation, parse_scenario
from tickwarden.simulate.report import to_json

SCENARIO = {
    "name": "warehouse migration",
    "start": "2026-12-01T00:55:00Z",
    "end": "2026-12-01T04:00:00Z",
    "tenants": ["acme"],
    "workflows": [
        {"tenant": "acme", "name": "flaky", "cron": "*/5 * * * *", "duration": 30},
        {"tenant": "acme", "name": "broken", "cron": "*/5 * * * *", "duration": 30},
    ],
    "faults": [
        # fails for half an hour inside the window, then recovers inside it
        {"workflow": "acme/flaky", "start": "2026-12-01T01:10:00Z", "end": "2026-12-01T01:40:00Z",
         "retryable": False, "error": "relation does not exist"},
        # fails across the window's end, escalating inside it, and recovers after it
        {"workflow": "acme/broken", "start": "2026-12-01T01:10:00Z", "end": "2026-12-01T03:30:00Z",
         "retryable": False, "error": "relation does not exist"},
    ],
    "maintenance": [{"tenant": "acme", "start": "2026-12-01T01:00:00Z", "end": "2026-12-01T03:00:00Z"}],
}


def simulate(raw: dict) -> dict:
    return to_json(Simulation(parse_scenario(raw, source="test"), url=TEST_URL).run())


def test_a_scenario_window_holds_deliveries_and_releases_the_open_alert_once_at_its_end():
    result = simulate(SCENARIO)
    by_workflow = {a["workflow"]: a for a in result["alerts"]}
    assert set(by_workflow) == {"flaky", "broken"}, "alerts open inside the window as usual"
    assert by_workflow["flaky"]["resolved_at"] < "2026-12-01T03:00:00Z"
    assert by_workflow["broken"]["escalated_at"] < "2026-12-01T03:00:00Z"
    notes = result["notifications"]
    assert [n for n in notes if n["workflow"] == "flaky"] == [], "opened and resolved inside: nothing sent"
    assert all(n["at"] >= "2026-12-01T03:00:00Z" for n in notes), "nothing is delivered inside the window"
    broken = [(n["event"], n["severity"], n["channel"]) for n in notes if n["workflow"] == "broken"]
    assert sorted(broken[:2]) == [("escalated", "critical", "acme"), ("escalated", "critical", "platform")]
    assert all(n["at"] < "2026-12-01T03:01:00Z" for n in notes[:2]), "delivered when the window ends"
    assert sorted(e for e, _, _ in broken[2:]) == ["resolved", "resolved"], "then the thread goes on as usual"
    assert {n["event"] for n in notes} <= {"opened", "escalated", "reassigned", "resolved"}
    assert len({(n["channel"], n["thread"]) for n in notes}) == 2


def test_without_the_window_the_same_night_notifies_both_alerts():
    result = simulate({**SCENARIO, "maintenance": []})
    assert {n["workflow"] for n in result["notifications"]} == {"flaky", "broken"}
    assert any(n["at"] < "2026-12-01T03:00:00Z" for n in result["notifications"])
