"""`tickwarden profile` and `profiles` through the real CLI: the retry backoff beside every other field."""

import json
import subprocess
import sys

CLI = [sys.executable, "-m", "tickwarden.cli"]


def tickwarden(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)


def test_it_prints_a_daily_schedules_backoff_and_takes_an_override():
    daily = json.loads(tickwarden("profile", "0 2 * * *", "--json").stdout)
    assert (daily["retries"], daily["backoff_seconds"]) == (3, [60, 300, 900])
    changed = json.loads(tickwarden("profile", "0 2 * * *", "--set", "backoff_seconds=30,120", "--json").stdout)
    assert changed["backoff_seconds"] == [30, 120, 120] and changed["overridden"] == ["backoff_seconds"]


def test_it_lists_each_bands_default_backoff():
    bands = {b["band"]: b["backoff_seconds"] for b in json.loads(tickwarden("profiles", "--json").stdout)}
    assert bands["frequent"] == [] and bands["hourly"] == [30] and bands["daily"] == [60, 300, 900]


def test_it_refuses_a_negative_backoff_with_one_line():
    done = tickwarden("profile", "0 2 * * *", "--set", "backoff_seconds=-5")
    assert done.returncode != 0 and "backoff_seconds" in done.stderr and len(done.stderr.strip().splitlines()) == 1
