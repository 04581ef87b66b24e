"""Backtesting recorded history through the CLI: the same attempts under another policy."""

import csv
import json
import os
import subprocess
import sys

import pytest

from tests.dbutil import TEST_URL

CLI = [sys.executable, "-m", "tickwarden.cli"]

# An hourly export: 01:00 recovers on its retry, 02:00 and 03:00 fail after theirs, 04:00 and 05:00 succeed.
OUTCOMES = {0: ["succeeded"], 1: ["failed", "succeeded"], 2: ["failed", "failed"], 3: ["failed", "failed"],
            4: ["succeeded"], 5: ["succeeded"]}


def history() -> list[dict]:
    records = []
    for hour, attempts in OUTCOMES.items():
        start = 0
        for number, outcome in enumerate(attempts, start=1):
            records.append({
                "workflow": "acme/export", "cron": "0 * * * *", "scheduled_for": f"2026-11-30T{hour:02d}:00:00Z",
                "attempt": number, "started_at": f"2026-11-30T{hour:02d}:{start:02d}:00Z",
                "finished_at": f"2026-11-30T{hour:02d}:{start + 1:02d}:00Z", "outcome": outcome,
                "error": None if outcome == "succeeded" else "could not connect to warehouse: password=hunter2",
            })
            start += 2
    return records


def tickwarden(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": TEST_URL}
    env.pop("TICKWARDEN_SCHEMA", None)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in history()) + "\n")
    return path


def test_a_naive_policy_would_have_sent_a_message_per_failed_tick(jsonl):
    done = tickwarden("backtest", str(jsonl), "--policy", "naive", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # tickwarden: 01:00 recovers; 02:00 and 03:00 are two confirmed failures → one alert, opened and resolved
    assert result["current"] == {"alerts": 1, "messages": 4, "threads": 2, "failed_ticks": 2}
    # no retries: 01:00 fails too, and every failed tick is its own message on both channels
    assert result["proposed"] == {"alerts": 3, "messages": 6, "threads": 6, "failed_ticks": 3}
    assert result["changed_workflows"]["acme/export"]["proposed_messages"] == 6
    assert "hunter2" not in done.stdout + done.stderr


def test_a_higher_threshold_would_have_stayed_quiet(tmp_path):
    path = tmp_path / "history.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(history()[0]))
        writer.writeheader()
        writer.writerows(history())
    done = tickwarden("backtest", str(path), "--set", "alert_after=3")
    assert done.returncode == 0, done.stderr
    assert "current: 1 alert(s), 4 message(s) in 2 thread(s)" in " ".join(done.stdout.split())
    assert "proposed: 0 alert(s), 0 message(s) in 0 thread(s)" in " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('{"workflow": "acme/export"}', "missing field 'cron'"),
        ('{"workflow": "acme/export", "cron": "0 * * * *", "scheduled_for": "yesterday", "attempt": 1,'
         ' "started_at": "x", "finished_at": "y", "outcome": "failed"}', "ISO 8601"),
        ('{"workflow": "acme/export", "cron": "0 * * * *", "scheduled_for": "2026-11-30T00:00:00Z", "attempt": 1,'
         ' "started_at": "2026-11-30T00:00:00Z", "finished_at": "2026-11-30T00:01:00Z", "outcome": "exploded"}',
         "outcome 'exploded'"),
        ("not json", "not valid JSON"),
    ],
)
def test_bad_history_gets_one_sentence(tmp_path, line, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    done = tickwarden("backtest", str(path), "--policy", "naive")
    assert done.returncode == 1 and fragment in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_nothing_to_compare_is_refused(jsonl):
    done = tickwarden("backtest", str(jsonl))
    assert done.returncode == 1 and "Nothing to compare" in done.stderr
