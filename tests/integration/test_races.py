"""Separate processes racing on the same ledger rows: the database keeps them honest."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from tests.dbutil import TEST_URL
from tests.helpers import create_run, make_workflow

RACER = Path(__file__).with_name("racer.py")
ROOT = Path(__file__).resolve().parents[2]


def race(schema: str, action: str, arg: str, racers: int) -> list[dict]:
    key = 900_000 + os.getpid()
    with psycopg.connect(TEST_URL, autocommit=True) as gate:
        gate.execute("SELECT pg_advisory_lock(%s)", (key,))
        # the racers import this checkout's package, not whichever one the environment has installed
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
        procs = [
            subprocess.Popen([sys.executable, str(RACER), TEST_URL, schema, action, arg, str(key)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for _ in range(racers)
        ]
        # wait until every racer is blocked on the gate, then open it
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            waiting = gate.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND NOT granted", (key,)
            ).fetchone()[0]
            if waiting == racers:
                break
            time.sleep(0.05)
        gate.execute("SELECT pg_advisory_unlock(%s)", (key,))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


def test_racing_processes_create_one_run_per_tick(db, schema, clock):
    workflow = make_workflow(db, clock.now())
    results = race(schema, "create-tick", f"{workflow.id},{workflow.tenant_id}", racers=4)
    created = [run for result in results for run in result["created"]]
    with db.transaction() as store:
        runs = store.ledger.list_runs(workflow.id)
        attempts = store.ledger.list_attempts(runs[0].id)
    assert len(created) == 1 and len(runs) == 1 and len(attempts) == 1


def test_racing_workers_lease_each_attempt_once(db, schema, clock):
    from datetime import timedelta

    workflow = make_workflow(db, clock.now(), cron="* * * * *", cadence_seconds=60)
    for minute in range(20):
        create_run(db, workflow, clock.now() - timedelta(minutes=minute), clock.now() - timedelta(hours=1))
    results = race(schema, "lease", "10", racers=3)
    leased = [a for result in results for a in result["leased"]]
    assert len(leased) == 20 and len(set(leased)) == 20
