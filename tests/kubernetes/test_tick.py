"""`tickwarden tick`: a CronJob's pod records its tick once and runs its attempt on the worker's path."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL
from tests.execution_helpers import SECRET
from tests.kubernetes.conftest import make_reconciler
from tickwarden import catalog
from tickwarden.clock import VirtualClock, WallClock
from tickwarden.deadlines import NEVER_RAN_ERROR, DeadlineDetector
from tickwarden.triggers.kubernetes import tick_from_job_name
from tickwarden.triggers.kubernetes_tick import record_tick, run_tick

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
PUBLISHED = datetime(2026, 11, 30, 11, 57, 10, tzinfo=UTC)
TICK = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: every-minute
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "* * * * *", starting_deadline_seconds: 120}
    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]
"""


@pytest.fixture(autouse=True)
def signing_key(monkeypatch):
    monkeypatch.setenv("TICKWARDEN_SECRET_KEY", SECRET)


def publish(db, tmp_path: Path, now: datetime = PUBLISHED) -> int:
    path = tmp_path / "acme.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, now)
    with db.transaction() as store:
        return store.catalog.get_schedule_for_workflow(store.catalog.get_workflow_by_name("acme", "every-minute").id).id


def runs(db):
    return sorted(catalog.list_runs(db, "acme", "every-minute", limit=100), key=lambda r: r.scheduled_for)


def test_a_pod_started_late_within_its_deadline_records_the_tick_it_was_started_for(db, tmp_path):
    sid = publish(db, tmp_path)
    job = f"tickwarden-s{sid}-{int(TICK.timestamp()) // 60}"
    # 90 s late: the next minute's tick has come too, but this pod was started for 12:00
    outcome = record_tick(db, sid, tick_from_job_name(sid, job), TICK + timedelta(seconds=90))
    assert outcome.status == "recorded"
    (run,) = runs(db)
    assert run.scheduled_for == TICK and run.status == "queued" and run.deadline_at > TICK


@pytest.mark.parametrize(("tick", "now", "reason"), [
    (TICK + timedelta(seconds=30), TICK + timedelta(seconds=31), "not a tick of"),
    (datetime(2026, 11, 30, 11, 57, tzinfo=UTC), TICK, "not after the schedule's last change"),
    (TICK, TICK + timedelta(seconds=121), "past its starting deadline"),
    (TICK + timedelta(minutes=5), TICK, "in the future"),
])
def test_it_refuses_a_tick_that_is_not_the_schedules_own(db, tmp_path, tick, now, reason):
    sid = publish(db, tmp_path)
    outcome = record_tick(db, sid, tick, now, worker_id="w")
    assert outcome.status == "refused" and reason in outcome.reason
    assert outcome.attempt is None and runs(db) == []


def test_it_refuses_ticks_of_a_paused_archived_or_unknown_schedule(db, tmp_path):
    sid = publish(db, tmp_path)
    catalog.pause(db, "acme", "every-minute", PUBLISHED)
    assert "paused" in record_tick(db, sid, TICK, TICK).reason
    catalog.resume(db, "acme", "every-minute", PUBLISHED)
    catalog.archive(db, "acme", "every-minute", PUBLISHED)
    assert "archived" in record_tick(db, sid, TICK, TICK).reason
    assert "does not exist" in record_tick(db, sid + 1000, TICK, TICK).reason
    assert runs(db) == []


def test_a_cronjob_fired_twice_makes_one_run_executed_once(db, tmp_path):
    sid = publish(db, tmp_path)
    clock = VirtualClock(TICK + timedelta(seconds=2))
    barrier = threading.Barrier(2)

    def pod(name: str):
        barrier.wait()
        return run_tick(db, sid, TICK, clock, name)

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(pod, ["tick@pod-a", "tick@pod-b"]))
    assert sorted(o.status for o in outcomes) == ["duplicate", "recorded"]
    executed = [o for o in outcomes if o.finished is not None]
    assert len(executed) == 1 and executed[0].finished.run_status == "succeeded"
    (run,) = runs(db)
    assert (run.scheduled_for, run.status, run.attempts_count) == (TICK, "succeeded", 1)


def test_a_pod_that_finds_its_tick_already_leased_by_a_worker_leaves_it(db, tmp_path):
    sid = publish(db, tmp_path)
    record_tick(db, sid, TICK, TICK, worker_id="worker@pool")  # recorded and leased by another
    again = record_tick(db, sid, TICK, TICK + timedelta(seconds=5), worker_id="tick@late-pod")
    assert again.status == "duplicate" and again.attempt is None


def test_a_tick_whose_pod_never_started_is_recorded_missed(db, cluster, settings, tmp_path):
    sid = publish(db, tmp_path)
    make_reconciler(db, cluster, settings).run_once(PUBLISHED)
    assert f"tickwarden-s{sid}" in cluster.cronjobs()
    detector = DeadlineDetector(db)
    detector.run_once(PUBLISHED)
    # 11:58 and 11:59 are fired by their pods; 12:00's pod never starts (quota full, controller down)
    for minute in (58, 59):
        tick = TICK.replace(hour=11, minute=minute)
        assert run_tick(db, sid, tick, VirtualClock(tick + timedelta(seconds=1)), "tick@pod").status == "recorded"
    for step in range(4):
        detector.run_once(TICK + timedelta(seconds=121 + 60 * step))
    by_tick = {r.scheduled_for: r for r in runs(db)}
    assert by_tick[TICK].status == "missed" and by_tick[TICK].error == NEVER_RAN_ERROR
    assert by_tick[TICK.replace(hour=11, minute=58)].status == "succeeded"
    assert by_tick[TICK.replace(hour=11, minute=59)].status == "succeeded"


@pytest.mark.slow
def test_the_cronjobs_own_pod_command_fired_twice_records_one_run(db, schema, cluster, settings, tmp_path):
    now = WallClock().now()
    sid = publish(db, tmp_path, now - timedelta(minutes=5))
    make_reconciler(db, cluster, settings).run_once(now)
    pod = cluster.cronjobs()[f"tickwarden-s{sid}"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    tick = now.replace(second=0, microsecond=0)
    job_name = f"tickwarden-s{sid}-{int(tick.timestamp()) // 60}"  # as the CronJob controller names it
    args = [a.replace("$(TICKWARDEN_JOB_NAME)", job_name) for a in container["args"]]
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_SECRET_KEY": SECRET, "TICKWARDEN_DATA_DIR": str(tmp_path)}
    env.pop("TICKWARDEN_SCHEMA", None)
    pods = [subprocess.Popen([str(BIN), *args, "--json"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in pods]
    assert [p.returncode for p in pods] == [0, 0], results
    outputs = [json.loads(out) for out, _ in results]
    assert sorted(o["status"] for o in outputs) == ["duplicate", "recorded"]
    (run,) = runs(db)
    assert run.scheduled_for == tick and run.status == "succeeded"


@pytest.mark.parametrize("args", [
    ["--schedule", "3", "--job-name", "tickwarden-s4-29000000"],
    ["--schedule", "3", "--job-name", "nightly-backup"],
    ["--schedule", "3", "--at", "yesterday"],
    ["--schedule", "3"],
])
def test_the_tick_command_refuses_bad_input_with_one_line_and_exit_2(args):
    done = subprocess.run([str(BIN), "tick", *args], check=False, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TICKWARDEN_DATABASE_URL": "postgresql://127.0.0.1:1/none"})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("tickwarden tick: ")
