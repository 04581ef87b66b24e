"""A worker process serves its own Prometheus metrics: the attempts it executed, under a stable replica name."""

import os
import signal
import subprocess
from datetime import timedelta

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.acceptance.test_worker_cli import BIN, ROOT, run_status, schema_url, wait_for
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tests.integration.fake_servers import free_port
from tickwarden.clock import WallClock

pytestmark = pytest.mark.slow


def scrape(port):
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_worker_serves_its_attempt_counters_on_its_metrics_port(db, schema, tmp_path):
    now = WallClock().now()
    workflow = make_runnable(db, now, [python_step("a", "noop")])
    run = queue_run(db, workflow, now - timedelta(seconds=1), now)
    port = free_port()
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": schema_url(schema), "TICKWARDEN_SECRET_KEY": SECRET,
           "TICKWARDEN_DATA_DIR": str(tmp_path), "TICKWARDEN_REPLICA": "batch-7"}
    with open(tmp_path / "worker.log", "w") as log:
        proc = subprocess.Popen([str(BIN), "worker", "--poll", "0.2", "--metrics-port", str(port)], cwd=ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: run_status(db, run.id) == "succeeded", what="the run to succeed")
        got = wait_for(lambda: (s := scrape(port)) and s.get(
            ("tickwarden_attempts_total", (("replica", "batch-7"), ("status", "succeeded")))) == 1 and s,
            what="the worker's metrics")
        assert got[("tickwarden_runs_total", (("replica", "batch-7"), ("status", "succeeded")))] == 1
        assert got[("tickwarden_schedule_lag_seconds_count", (("replica", "batch-7"),))] == 1
        assert ("process_resident_memory_bytes", ()) in got
        assert any(name == "tickwarden_build_info" for name, _ in got)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_bad_metrics_port_is_one_clear_line(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": schema_url(schema), "TICKWARDEN_DATA_DIR": str(tmp_path)}
    done = subprocess.run([str(BIN), "worker", "--metrics-port", "70000"], cwd=ROOT, env=env, capture_output=True, check=False,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "--metrics-port" in done.stderr and "Traceback" not in done.stderr
