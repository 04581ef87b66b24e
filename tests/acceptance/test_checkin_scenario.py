"""Scenario `checkins:` through `tickwarden simulate --json` (real CLI, real PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.test_simulate import simulate, tickwarden

HERE = Path(__file__).parent / "scenarios"


def test_reports_of_external_workflows_drive_the_alerts():
    result = simulate(HERE / "checkins.yaml")
    runs = {(r["workflow"], r["scheduled_for"][11:16]): r for r in result["runs"]}
    export = runs[("export", "02:00")]
    assert (export["status"], export["attempts"], export["finished_at"]) == ("succeeded", 1, "2026-11-30T02:04:00Z")
    ledger = runs[("ledger", "02:00")]
    # no report at all: missed at tick + grace (15 min for a daily cadence), within a deadline pass; neither
    # the timeout (the job never said it started) nor a retry budget (tickwarden never retries it) counts
    assert ledger["status"] == "missed" and "2026-11-30T02:15:00Z" <= ledger["finished_at"] <= "2026-11-30T02:16:15Z"
    sync = [runs[("sync", f"02:{m:02d}")]["status"] for m in range(0, 20, 5)]
    assert sync == ["failed", "failed", "failed", "succeeded"]  # the late success at 02:17 changed nothing
    alerts = {a["workflow"]: a for a in result["alerts"]}
    assert set(alerts) == {"ledger", "sync"}  # the export that reported success never alerts
    assert (alerts["sync"]["opened_at"], alerts["sync"]["resolved_at"]) == ("2026-11-30T02:11:00Z",
                                                                            "2026-11-30T02:16:00Z")
    assert (alerts["sync"]["owner"], alerts["sync"]["failure_count"]) == ("customer", 3)
    assert alerts["ledger"]["owner"] == "engineering" and alerts["ledger"]["resolved_at"] is None
    events = sorted((n["workflow"], n["event"]) for n in result["notifications"])
    assert ("sync", "opened") in events and ("sync", "resolved") in events and ("ledger", "opened") in events


@pytest.mark.parametrize("change, message", [
    ("kind: external}    # fails", "is not of kind external"),
    ("acme/export, at: \"2026-11-30T02:00:20Z\"", "unknown workflow"),
])
def test_a_checkin_of_a_managed_or_unknown_workflow_is_refused_before_anything_runs(tmp_path, change, message):
    text = (HERE / "checkins.yaml").read_text()
    if change.startswith("kind"):
        text = text.replace("kind: external}    # fails", "kind: managed}    # fails")
    else:
        text = text.replace(change, "acme/nope, at: \"2026-11-30T02:00:20Z\"")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    done = tickwarden("simulate", str(path), "--json")
    assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr
