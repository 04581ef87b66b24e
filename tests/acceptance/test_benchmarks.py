"""A benchmark in its own process: its JSON figures on its last line, gathered by the runner."""

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.__main__ import run
from tests.dbutil import TEST_URL

ROOT = Path(__file__).resolve().parents[2]
SMALL_TICKER = ["--schedules", "300", "--repeat", "1", "--batch", "100"]


def test_a_benchmark_prints_its_figures_with_their_floor_as_its_last_line():
    env = {**os.environ, "TICKWARDEN_BENCH_DATABASE_URL": TEST_URL}
    done = subprocess.run([sys.executable, "-m", "benchmarks.ticker", "--json", *SMALL_TICKER], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(set(f) == {"name", "value", "unit", "floor", "ratio", "target", "met"} for f in figures)
    [one_pass] = [f for f in figures if f["name"] == "300 due at once, one pass (batch = fleet)"]
    assert one_pass["floor"] > 0 and one_pass["value"] > 0
    assert abs(one_pass["ratio"] - one_pass["value"] / one_pass["floor"]) < 0.01
    assert one_pass["target"] == "<= 1.5x floor" and one_pass["met"] == (one_pass["ratio"] <= 1.5)
    assert "filling 300 schedules" in done.stderr   # progress goes to stderr, never after the JSON


def test_the_runner_gathers_a_benchmarks_figures_from_its_own_process(monkeypatch, capsys):
    monkeypatch.setenv("TICKWARDEN_BENCH_DATABASE_URL", TEST_URL)
    monkeypatch.chdir(ROOT)
    figures, status = run("ticker", SMALL_TICKER)
    assert figures is not None and status == 0
    names = [f.name for f in figures]
    assert "ticker: 300 due at once, batched passes (batch 100)" in names
    assert all(f.floor for f in figures if "due at once" in f.name)
    assert "######## ticker" in capsys.readouterr().out


def test_the_runner_keeps_the_figures_of_a_benchmark_that_printed_them_and_then_failed(monkeypatch, tmp_path, capsys):
    """The noise month exits 1 after its figures when tickwarden missed a genuine incident: the
    figures still reach the summary, and the exit status says the benchmark failed."""
    figure = {"name": "genuine incidents detected", "value": 147, "unit": "incidents", "floor": 148,
              "ratio": 0.99, "target": None, "met": None}
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho 'progress'\necho '{json.dumps([figure])}'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    figures, status = run("noise", [])
    assert status == 1
    assert figures is not None and [(f.name, f.value, f.floor) for f in figures] == [
        ("noise: genuine incidents detected", 147, 148)]
    assert "exit status 1" in capsys.readouterr().out


def test_the_runner_refuses_an_unknown_benchmark_with_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--only", "tickr"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert "unknown benchmark 'tickr'" in done.stderr and "Traceback" not in done.stderr


def test_the_simulator_profile_counts_round_trips_per_loop_and_they_add_up():
    env = {**os.environ, "TICKWARDEN_BENCH_DATABASE_URL": TEST_URL}
    done = subprocess.run([sys.executable, "-m", "benchmarks.simulate_profile", "--workflows", "20", "--hours", "2",
                           "--top", "5", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {f["name"]: f["value"] for f in json.loads(done.stdout.strip().splitlines()[-1])}
    loops = {name: value for name, value in figures.items() if name != "round trips: total"}
    assert figures["round trips: total"] == sum(loops.values()) > 0
    # The loops the simulator drives are told apart, each with the round trips it cost.
    assert loops["round trips: ticker"] > 0 and loops["round trips: poller"] > 0
    assert "20 workflows x 2 virtual hours" in done.stdout


def test_the_pipeline_benchmark_reports_the_pollers_own_cpu_beside_their_throughput():
    env = {**os.environ, "TICKWARDEN_BENCH_DATABASE_URL": TEST_URL}
    done = subprocess.run([sys.executable, "-m", "benchmarks.pipeline", "--workflows", "50", "--history", "5",
                           "--outcomes", "4", "--latency-seconds", "1", "--latency-rate", "50", "--repeat", "1",
                           "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {f["name"]: f for f in json.loads(done.stdout.strip().splitlines()[-1])}
    for replicas in (1, 2):
        cpu = figures[f"{replicas} replica(s), pollers' own CPU per outcome, median of 1 runs"]
        assert cpu["unit"] == "µs" and cpu["value"] > 0
        server = figures[f"{replicas} replica(s), their backends' CPU per outcome, median of 1 runs"]
        assert server["unit"] == "µs" and server["value"] > 0
        assert figures[f"{replicas} replica(s), batch 500, median of 1 runs"]["value"] > 0
    assert "pollers' own CPU" in done.stdout and "% of wall time × replicas" in done.stdout


def test_the_simulator_benchmark_puts_the_bare_ledgers_time_beside_its_own_and_the_servers_cpu():
    env = {**os.environ, "TICKWARDEN_BENCH_DATABASE_URL": TEST_URL}
    done = subprocess.run([sys.executable, "-m", "benchmarks.simulate", "--workflows", "20", "--hours", "2", "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {f["name"]: f for f in json.loads(done.stdout.strip().splitlines()[-1])}
    wall = figures["20 workflows x 2 virtual hours, wall"]
    assert 0 < wall["floor"] < wall["value"]
    assert abs(wall["ratio"] - wall["value"] / wall["floor"]) < 0.01 * wall["ratio"]  # figures rounded to 4 places
    # The test server runs on this machine, so its CPU is read from /proc.
    assert figures["20 workflows x 2 virtual hours, database server CPU"]["value"] > 0
    assert "the runs and outcomes alone" in done.stdout
