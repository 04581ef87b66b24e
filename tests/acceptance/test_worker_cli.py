import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tickwarden.clock import WallClock
from tickwarden.db import Database
from tickwarden.reaper import LeaseReaper

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
pytestmark = pytest.mark.slow


def schema_url(schema: str) -> str:
    return f"{TEST_URL}?options=-c%20search_path%3D{schema}"


@pytest.fixture
def cli_env(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": schema_url(schema), "TICKWARDEN_SECRET_KEY": SECRET,
           "TICKWARDEN_DATA_DIR": str(tmp_path)}
    env.pop("TICKWARDEN_SCHEMA", None)
    return env


@pytest.fixture
def spawn(cli_env, tmp_path):
    procs = []

    def start(*args):
        log = open(tmp_path / f"worker-{len(procs)}.log", "w")
        proc = subprocess.Popen([str(BIN), "worker", "--poll", "0.2", *args], cwd=ROOT, env=cli_env,
                                stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def shared_dir():
    """A directory the environment process may write to: it runs as its own user, not the test's."""
    path = Path(tempfile.mkdtemp(prefix="tw-shared-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def run_status(db, run_id):
    with db.transaction() as store:
        return store.ledger.get_run(run_id).status


def test_the_database_url_can_select_the_schema(schema):
    with Database(schema_url(schema), max_size=1) as db, db.connection() as conn:
        assert conn.execute("SELECT current_schema()").fetchone()[0] == schema


def test_a_killed_worker_loses_its_attempt_and_a_second_worker_runs_the_retry(db, spawn, shared_dir):
    wall = WallClock()
    marker = shared_dir / "started"
    wf = make_runnable(db, wall.now(), [python_step("slow", "hang_once", params={"marker": str(marker)})], timeout=600)
    run = queue_run(db, wf, wall.now() - timedelta(seconds=1), wall.now(), budget=2)
    first = spawn("--id", "first", "--lease", "2")
    wait_for(marker.exists, what="the step to start")
    with db.transaction() as store:
        [instance] = store.execution.list_environment_instances()
    first.send_signal(signal.SIGKILL)
    first.wait()
    # The environment process notices its worker is gone and exits too.
    wait_for(lambda: not Path(f"/proc/{instance.pid}").exists()
             or "Z" in Path(f"/proc/{instance.pid}/stat").read_text().split()[2], 10, "the orphan runner to exit")

    reaper = LeaseReaper(db)
    reaper.run_once(wall.now() + timedelta(seconds=3))
    with db.transaction() as store:
        [attempt] = store.ledger.list_attempts(run.id)
        assert attempt.status == "lost" and store.ledger.get_run(run.id).status == "pending_retry"
        store.ledger.queue_retries([(run.id, run.scheduled_for)], wall.now())

    second = spawn("--id", "second", "--lease", "2")
    wait_for(lambda: run_status(db, run.id) == "succeeded", what="the retry to succeed")
    second.send_signal(signal.SIGTERM)
    assert second.wait(20) == 0
    with db.transaction() as store:
        attempts = store.ledger.list_attempts(run.id)
        finished = store.ledger.get_run(run.id)
        instances = store.execution.list_environment_instances(include_stopped=True)
    assert [(a.number, a.status, a.worker_id) for a in attempts] == [(1, "lost", "first"), (2, "succeeded", "second")]
    assert finished.recovered
    assert {i.worker_id: i.status for i in instances}["second"] == "stopped"


def test_two_worker_processes_never_run_the_same_attempt(db, spawn, cli_env, tmp_path):
    wall = WallClock()
    # Each step takes a moment, and both workers are up before the queue fills, so both
    # are busy at once while it drains.
    wf = make_runnable(db, wall.now(), [python_step("first", "hang", params={"seconds": 0.3})])
    workers = [spawn("--id", f"w{i}") for i in range(2)]
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    wait_for(lambda: all("started" in log.read_text() for log in logs), 30, "both workers to start")
    runs = [queue_run(db, wf, wall.now() - timedelta(minutes=i), wall.now()) for i in range(10)]
    wait_for(lambda: all(run_status(db, r.id) == "succeeded" for r in runs), 60, "every run to succeed")
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(20) for proc in workers] == [0, 0]
    with db.connection() as conn:
        per_run = conn.execute("SELECT run_id, count(*) FROM attempts GROUP BY run_id").fetchall()
        steps = conn.execute("SELECT count(*) FROM attempt_steps").fetchone()[0]
        by = dict(conn.execute("SELECT worker_id, count(*) FROM attempts GROUP BY worker_id").fetchall())
    assert sorted(n for _, n in per_run) == [1] * 10 and steps == 10
    assert set(by) == {"w0", "w1"} and sum(by.values()) == 10

    listed = subprocess.run([str(BIN), "envs", "--json", "--all"], cwd=ROOT, env=cli_env, capture_output=True,
                            text=True, check=True)
    rows = json.loads(listed.stdout)
    assert rows and {r["status"] for r in rows} == {"stopped"} and {r["tenant"] for r in rows} == {"acme"}
    assert sum(r["runs_served"] for r in rows) == 10


def test_worker_processes_leasing_in_batches_run_every_attempt_once(db, spawn, shared_dir, tmp_path):
    wall = WallClock()
    tally = shared_dir / "tally"
    wf = make_runnable(db, wall.now(), [python_step("tally", "tally", params={"path": str(tally)})])
    workers = [spawn("--id", "b0", "--batch", "4"), spawn("--id", "b1", "--concurrency", "2", "--batch", "3")]
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    wait_for(lambda: all("started" in log.read_text() for log in logs), 30, "both workers to start")
    runs = [queue_run(db, wf, wall.now() - timedelta(minutes=i), wall.now()) for i in range(30)]
    wait_for(lambda: all(run_status(db, r.id) == "succeeded" for r in runs), 90, "every run to succeed")
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(20) for proc in workers] == [0, 0]
    executions = Counter(tally.read_text().splitlines())
    assert len(executions) == 30 and set(executions.values()) == {1}
    with db.connection() as conn:
        per_run = conn.execute("SELECT run_id, count(*) FROM attempts GROUP BY run_id").fetchall()
        leftover = conn.execute("SELECT count(*) FROM attempts WHERE status <> 'succeeded'").fetchone()[0]
    assert sorted(n for _, n in per_run) == [1] * 30 and leftover == 0


def test_each_loop_of_a_worker_leases_eight_at_once_whatever_its_concurrency(spawn, tmp_path):
    # The batch is not split between the loops: a lease costs about as much for one attempt as for eight.
    worker = spawn("--id", "c4", "--concurrency", "4")
    log = tmp_path / "worker-0.log"
    wait_for(lambda: "started" in log.read_text(), 30, "the worker to start")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert "worker c4 started (concurrency 4, batch 8," in log.read_text()


def test_a_stopping_worker_releases_an_attempt_that_outlives_its_grace(db, spawn, shared_dir):
    wall = WallClock()
    marker = shared_dir / "started"
    wf = make_runnable(db, wall.now(), [python_step("slow", "hang_once", params={"marker": str(marker)})], timeout=600)
    run = queue_run(db, wf, wall.now() - timedelta(seconds=1), wall.now())
    worker = spawn("--id", "leaving", "--grace", "0.5")
    wait_for(marker.exists, what="the step to start")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    with db.transaction() as store:
        [attempt] = store.ledger.list_attempts(run.id)
        assert (attempt.status, attempt.worker_id) == ("queued", None)
        assert store.ledger.get_run(run.id).status == "queued"
        assert {i.status for i in store.execution.list_environment_instances(include_stopped=True)} == {"dead"}


def test_a_worker_process_reuses_a_warm_environment_stops_it_when_idle_and_times_out_a_hanging_step(db, spawn):
    wall = WallClock()
    warm = make_runnable(db, wall.now(), [python_step("who", "pid")], name="warm", idle_timeout=2)
    stuck = make_runnable(db, wall.now(), [python_step("stuck", "hang", timeout=1)], name="stuck", tenant="globex")
    runs = [queue_run(db, warm, wall.now() - timedelta(minutes=i), wall.now()) for i in (2, 1)]
    hanging = queue_run(db, stuck, wall.now() - timedelta(minutes=1), wall.now(), budget=0)
    worker = spawn("--id", "solo")
    wait_for(lambda: all(run_status(db, r.id) in ("succeeded", "failed") for r in [*runs, hanging]), 30, "the runs")
    with db.transaction() as store:
        pids = set()
        for r in runs:
            [attempt] = store.ledger.list_attempts(r.id)
            pids.add(store.api.list_run_steps(r.id)[0].output["pid"])
        [timed_out] = store.ledger.list_attempts(hanging.id)
    assert len(pids) == 1
    assert timed_out.error_category == "timeout" and timed_out.failed_step == "stuck"

    def warm_stopped():
        with db.transaction() as store:
            rows = store.execution.list_environment_instances(include_stopped=True)
        return [i for i in rows if i.tenant == "acme" and i.status == "stopped" and i.runs_served == 2]

    wait_for(warm_stopped, 15, "the idle environment to stop")
    with pytest.raises(ProcessLookupError):  # the worker stopped and reaped the idle process
        os.kill(pids.pop(), 0)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
