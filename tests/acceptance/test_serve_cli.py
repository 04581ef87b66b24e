"""`tickwarden serve`: replicas as real subprocesses on the wall clock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.dbutil import TEST_URL
from tickwarden.cli.service_cmd import WorkerSupervisor

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
pytestmark = pytest.mark.slow

EVERY_MINUTE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: heartbeat
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "* * * * *"}
    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]
"""


def test_two_replicas_make_exactly_one_run_per_tick_over_two_minute_boundaries(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path)}
    env.pop("TICKWARDEN_SCHEMA", None)
    workflow_file = tmp_path / "every-minute.yaml"
    workflow_file.write_text(EVERY_MINUTE)
    applied = subprocess.run([str(BIN), "apply", str(workflow_file)], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)
    assert applied.returncode == 0, applied.stderr
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as conn:
        published = conn.execute("SELECT updated_at FROM schedules").fetchone()[0]
    logs = [open(tmp_path / f"serve-{i}.log", "w+") for i in range(2)]
    replicas = [
        subprocess.Popen([str(BIN), "serve", "--no-api", "--replica-id", f"replica-{i}"], cwd=ROOT, env=env,
                         stdout=log, stderr=subprocess.STDOUT)
        for i, log in enumerate(logs)
    ]
    try:
        first = published.replace(second=0, microsecond=0) + timedelta(minutes=1)
        second = first + timedelta(minutes=1)
        # past the second boundary, with room for a loaded machine's slow pass
        while datetime.now(UTC) < second + timedelta(seconds=8):
            assert all(r.poll() is None for r in replicas), "a replica exited early"
            time.sleep(1)
        for replica in replicas:
            replica.send_signal(signal.SIGTERM)
        codes = [replica.wait(timeout=30) for replica in replicas]
    finally:
        for replica in replicas:
            if replica.poll() is None:
                replica.kill()
                replica.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    assert codes == [0, 0], outputs
    assert not any("Traceback" in out for out in outputs), outputs
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as conn:
        ticks = [row[0] for row in conn.execute(
            "SELECT scheduled_for FROM runs WHERE NOT manual ORDER BY scheduled_for").fetchall()]
        loops = conn.execute("SELECT replica_id, loop, passes FROM loop_heartbeats ORDER BY 1, 2").fetchall()
    assert first in ticks and second in ticks, ticks
    assert len(ticks) == len(set(ticks))
    # every minute from the first boundary on has exactly one run, none missing
    assert ticks == [first + timedelta(minutes=i) for i in range(len(ticks))]
    every_loop = sorted(["deadlines", "escalation", "lease-reaper", "notifier", "poller", "retention", "ticker",
                         "watchdog"])
    assert [(r, loop) for r, loop, _ in loops] == [(replica, loop) for replica in ("replica-0", "replica-1")
                                                   for loop in every_loop]
    # The retention sweeper passes every ten minutes (once in this test), the watchdog every 30 s.
    assert all(passes >= 2 for _, loop, passes in loops if loop not in ("retention", "watchdog"))
    assert all(passes >= 1 for _, loop, passes in loops)


def test_the_supervisor_restarts_a_worker_that_dies_and_stops_them_on_exit():
    supervisor = WorkerSupervisor(2, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    supervisor.start()
    try:
        victim = supervisor.children[0]
        victim.kill()
        deadline = time.monotonic() + 15
        while supervisor.children[0] is victim or supervisor.children[0].poll() is not None:
            assert time.monotonic() < deadline, "the dead worker was not restarted"
            time.sleep(0.1)
        assert supervisor.restarts == 1
    finally:
        supervisor.stop(grace=5)
    assert all(child.poll() is not None for child in supervisor.children)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sigterm_with_the_api_on_stops_the_worker_children_too(schema, tmp_path):
    import httpx
    import psutil

    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path)}
    env.pop("TICKWARDEN_SCHEMA", None)
    port = _free_port()
    log = open(tmp_path / "serve.log", "w+")
    serve = subprocess.Popen([str(BIN), "serve", "--workers", "2", "--port", str(port)], cwd=ROOT, env=env,
                             stdout=log, stderr=subprocess.STDOUT)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            assert serve.poll() is None and time.monotonic() < deadline, "serve did not come up"
            workers = psutil.Process(serve.pid).children()
            try:
                up = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                up = False
            if up and len(workers) == 2:
                break
            time.sleep(0.5)
        serve.send_signal(signal.SIGTERM)
        code = serve.wait(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        for worker in workers:
            if worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE:
                worker.kill()
    log.seek(0)
    output = log.read()
    log.close()
    assert code == 0, output
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers), output
