"""The simulator through the real CLI: the seed's two nights, determinism, baselines, bad input."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "src" / "tickwarden" / "scenarios"
HERE = Path(__file__).parent / "scenarios"
CLI = [sys.executable, "-m", "tickwarden.cli"]


def tickwarden(*args: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": TEST_URL, **extra_env}
    env.pop("TICKWARDEN_SCHEMA", None)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=600)


def simulate(path: Path, *extra: str) -> dict:
    done = tickwarden("simulate", str(path), "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def runs_of(result: dict, workflow: str) -> list[dict]:
    return [r for r in result["runs"] if r["workflow"] == workflow]


def test_the_transient_fault_night_sends_nothing():
    result = simulate(SEEDS / "seed-transient-fault.yaml")
    nightly = runs_of(result, "nightly-pipeline")
    assert [(r["scheduled_for"], r["status"], r["recovered"], r["attempts"]) for r in nightly] == [
        ("2026-11-30T02:00:00Z", "succeeded", True, 2)
    ]
    checks = {r["scheduled_for"]: r for r in runs_of(result, "quality-check")}
    assert checks["2026-11-30T02:05:00Z"]["status"] == "failed"
    assert checks["2026-11-30T02:10:00Z"]["status"] == "succeeded"
    assert sum(r["status"] == "failed" for r in checks.values()) == 1
    assert result["alerts"] == [] and result["notifications"] == []
    assert result["scenario"] == "nightly transient fault"


def test_the_genuine_defect_night_is_two_threads_with_a_beginning_and_an_end():
    result = simulate(SEEDS / "seed-genuine-defect.yaml")
    nightly = runs_of(result, "nightly-pipeline")
    tick = next(r for r in nightly if not r["manual"])
    # a daily job's three retries: a step error in customer code is retried at once, not backed off
    assert (tick["status"], tick["attempts"], tick["recovered"]) == ("failed", 4, False)
    assert "customer_id" in tick["error"]
    manual = [r for r in nightly if r["manual"]]
    assert [(r["status"], r["scheduled_for"]) for r in manual] == [("succeeded", "2026-11-30T09:00:00Z")]

    alerts = {a["workflow"]: a for a in result["alerts"]}
    assert len(result["alerts"]) == 2
    pipeline, check = alerts["nightly-pipeline"], alerts["quality-check"]
    assert (pipeline["first_severity"], pipeline["severity"], pipeline["failure_count"]) == ("critical", "critical", 1)
    assert pipeline["escalated_at"] is None and pipeline["resolved_at"] >= "2026-11-30T09:00:00Z"
    assert "2026-11-30T02:03:00Z" <= pipeline["opened_at"] <= "2026-11-30T02:10:00Z"  # pages within minutes
    assert (check["first_severity"], check["severity"]) == ("warning", "critical")
    assert check["opened_at"] < check["escalated_at"] < check["resolved_at"]
    assert check["failure_count"] >= 3

    by_thread = {}
    for note in result["notifications"]:
        by_thread.setdefault((note["channel"], note["thread"]), []).append(note)
    # one thread per alert and channel: the customer's and the platform's
    assert len(by_thread) == 4
    assert {channel for channel, _ in by_thread} == {"acme", "platform"}
    for notes in by_thread.values():
        assert len({n["alert"] for n in notes}) == 1
        events = [n["event"] for n in notes]
        assert events[0] == "opened" and events[-1] == "resolved"
        expected = ["opened", "escalated", "resolved"] if notes[0]["alert"] == check["id"] else ["opened", "resolved"]
        assert events == expected
    assert len(result["notifications"]) == 10


def test_the_same_scenario_gives_the_same_output():
    first = tickwarden("simulate", str(HERE / "everything.yaml"), "--json")
    second = tickwarden("simulate", str(HERE / "everything.yaml"), "--json")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    result = json.loads(first.stdout)
    statuses = Counter(r["status"] for r in result["runs"])
    assert statuses["missed"] >= 1  # the trigger outage left the 02:00 hourly tick unrun
    hourly = {r["scheduled_for"]: r for r in runs_of(result, "hourly-export")}
    assert hourly["2026-11-30T01:00:00Z"]["recovered"]
    assert hourly["2026-11-30T02:00:00Z"]["status"] == "missed"
    nightly = runs_of(result, "nightly")
    assert nightly[0]["status"] == "succeeded" and nightly[0]["attempts"] == 2  # the crash was retried
    sync_alerts = [a for a in result["alerts"] if a["workflow"] == "sync"]
    assert len(sync_alerts) == 1 and sync_alerts[0]["owner"] == "customer"
    assert sync_alerts[0]["resolved_at"] is not None


@pytest.mark.parametrize(
    ("policy", "alerts", "notifications", "failed_runs"),
    [
        ("naive", 4, 8, 4),  # 01:10, 01:20, 01:30 and the blip at 01:40, each a message to both channels
        ("fixed-retries", 3, 6, 3),  # the retry five minutes later saves 01:40
        ("first-failure", 1, 4, 4),  # down at 01:10, up at 01:50
        ("threshold", 1, 4, 4),  # opens at the third failure (01:30), resolves at 01:50
        ("tickwarden", 1, 4, 4),  # a 10-minute check: no retry, warning at the third failure, resolves at 01:50
    ],
)
def test_each_policy_on_a_hand_counted_scenario(policy, alerts, notifications, failed_runs):
    result = simulate(HERE / "baselines.yaml", "--policy", policy)
    assert sum(r["status"] == "failed" for r in result["runs"]) == failed_runs
    assert len(result["alerts"]) == alerts
    assert len(result["notifications"]) == notifications
    assert {n["channel"] for n in result["notifications"]} == {"acme", "platform"}


def test_the_timeline_ends_with_the_counts():
    done = tickwarden("simulate", str(HERE / "baselines.yaml"))
    assert done.returncode == 0, done.stderr
    assert "01:10" in done.stdout and "Notifications sent: 4 in 2 thread(s)" in done.stdout


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("start: 2026-11-30T00:00:00Z\nend: 2026-11-30T01:00:00Z\ntenants: [a]\nworkflows: []\nbogus: 1\n", "unknown key 'bogus'"),
        ("start: 2026-11-30T00:00:00Z\nend: 2026-11-30T01:00:00Z\ntenants: [a]\n"
         "workflows: [{tenant: a, name: w, cron: '* * * * *'}]\n"
         "faults: [{workflow: a/nope, start: 2026-11-30T00:10:00Z, end: 2026-11-30T00:20:00Z}]\n", "unknown workflow 'a/nope'"),
        ("start: 2026-11-30T02:00:00Z\nend: 2026-11-30T01:00:00Z\ntenants: [a]\n"
         "workflows: [{tenant: a, name: w, cron: '* * * * *'}]\n", "'end' must be after 'start'"),
        ("start: 2026-11-30T00:00:00Z\nend: 2026-11-30T01:00:00Z\ntenants: [a]\n"
         "workflows: [{tenant: a, name: w, cron: '0 2 30 2 *'}]\n", "day-of-month"),
    ],
)
def test_bad_scenarios_exit_non_zero_with_one_sentence(tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    done = tickwarden("simulate", str(path), "--json")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in done.stderr


def test_an_unknown_policy_is_refused():
    done = tickwarden("simulate", str(HERE / "baselines.yaml"), "--policy", "yolo")
    assert done.returncode == 1 and "Unknown policy 'yolo'" in done.stderr


def test_the_demo_prints_both_nights_side_by_side_with_their_counts_on_a_wide_terminal():
    done = tickwarden("demo", COLUMNS="200")
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines()
                  if "nightly transient fault" in line and "simulating" not in line)
    assert "nightly genuine defect" in header  # one row: the two nights side by side
    flat = " ".join(done.stdout.split())
    assert "nightly transient fault: tickwarden sent 0 notification(s) in 0 thread(s) about 0 alert(s)" in flat
    assert "nightly genuine defect: tickwarden sent 10 notification(s) in 4 thread(s) about 2 alert(s)" in flat
    assert "one message per failure would have sent 170 (85 per channel)" in flat


def test_simulate_runs_a_shipped_scenario_by_name():
    done = tickwarden("simulate", "seed-genuine-defect", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["scenario"] == "nightly genuine defect"
    unknown = tickwarden("simulate", "seed-nope")
    assert unknown.returncode == 1 and "No scenario file or shipped scenario named 'seed-nope'" in unknown.stderr


EMPTY_FEED = """
name: empty feed
start: "2026-12-01T00:55:00Z"
end:   "2026-12-01T02:55:00Z"
tenants: [acme]
workflows:
  - {tenant: acme, name: orders-feed, cron: "*/10 * * * *", duration: 60, expect_rows: true}
  - {tenant: acme, name: audit-feed, cron: "*/10 * * * *", duration: 60}
faults:
  - {workflow: acme/orders-feed, start: "2026-12-01T01:00:00Z", end: "2026-12-01T02:00:00Z", mode: empty}
  - {workflow: acme/audit-feed, start: "2026-12-01T01:00:00Z", end: "2026-12-01T02:00:00Z", mode: empty}
"""


def test_a_feed_that_expects_rows_alerts_on_zero_row_successes_and_shows_the_rows(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text(EMPTY_FEED)
    result = simulate(path)
    orders = {r["scheduled_for"]: r for r in runs_of(result, "orders-feed")}
    assert orders["2026-12-01T01:10:00Z"]["status"] == "failed"
    assert orders["2026-12-01T01:10:00Z"]["rows"] == 0
    assert orders["2026-12-01T02:10:00Z"] == {**orders["2026-12-01T02:10:00Z"], "status": "succeeded", "rows": 1}
    # the same empty window on a feed that does not expect rows is a success with zero rows
    audit = runs_of(result, "audit-feed")
    assert {r["status"] for r in audit} == {"succeeded"}
    assert {r["rows"] for r in audit} == {0, None}
    assert [(a["workflow"], a["owner"]) for a in result["alerts"]] == [("orders-feed", "customer")]
    assert result["alerts"][0]["resolved_at"] is not None


def test_a_bad_fault_mode_is_refused_with_one_sentence(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(EMPTY_FEED.replace("mode: empty}", "mode: hollow}", 1))
    done = tickwarden("simulate", str(path), "--json")
    assert done.returncode != 0 and "faults[0].mode" in done.stderr and "Traceback" not in done.stderr


CANCELLED_TICK = """
name: cancelled tick
start: "2026-12-01T00:55:00Z"
end:   "2026-12-01T01:50:00Z"
tenants: [acme]
workflows:
  - {tenant: acme, name: feed, cron: "*/10 * * * *", duration: 300}
faults:
  - {workflow: acme/feed, start: "2026-12-01T01:02:00Z", end: "2026-12-01T01:03:00Z", retryable: false}
  - {workflow: acme/feed, start: "2026-12-01T01:12:00Z", end: "2026-12-01T01:13:00Z", retryable: false}
  - {workflow: acme/feed, start: "2026-12-01T01:22:00Z", end: "2026-12-01T01:23:00Z", retryable: false}
  - {workflow: acme/feed, start: "2026-12-01T01:32:00Z", end: "2026-12-01T01:33:00Z", retryable: false}
cancellations:
  - {workflow: acme/feed, at: "2026-12-01T01:21:00Z", by: oncall}
"""


def test_a_cancelled_run_is_not_retried_and_neither_breaks_nor_extends_the_streak(tmp_path):
    path = tmp_path / "cancel.yaml"
    path.write_text(CANCELLED_TICK)
    result = simulate(path)
    feed = {r["scheduled_for"][11:16]: r for r in runs_of(result, "feed")}
    assert [(t, feed[t]["status"]) for t in ("01:00", "01:10", "01:20", "01:30")] == [
        ("01:00", "failed"), ("01:10", "failed"), ("01:20", "cancelled"), ("01:30", "failed")]
    assert feed["01:20"]["attempts"] == 1 and feed["01:20"]["error"] is None
    # the third confirmed failure is 01:30's: the alert opens then, counting three failures
    (alert,) = result["alerts"]
    assert alert["failure_count"] == 3 and alert["opened_at"].startswith("2026-12-01T01:32")


def test_without_the_cancel_the_same_night_alerts_a_tick_earlier(tmp_path):
    path = tmp_path / "uncancelled.yaml"
    path.write_text(CANCELLED_TICK.split("cancellations:")[0])
    (alert,) = simulate(path)["alerts"]
    assert alert["opened_at"].startswith("2026-12-01T01:22")


def test_a_cancellation_of_an_unknown_workflow_is_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(CANCELLED_TICK.replace("{workflow: acme/feed, at:", "{workflow: acme/nope, at:"))
    done = tickwarden("simulate", str(path), "--json")
    assert done.returncode != 0 and "cancellations[0].workflow" in done.stderr and "Traceback" not in done.stderr
