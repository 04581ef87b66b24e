"""Retries as Jobs: each retry attempt gets one Job, tagged with its run and attempt, whose pod runs it."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.execution_helpers import SECRET
from tests.kubernetes.conftest import NAMESPACE
from tickwarden import catalog
from tickwarden.clock import VirtualClock
from tickwarden.errors import InvalidInput
from tickwarden.poller import OutcomePoller
from tickwarden.service import build_loops
from tickwarden.triggers.kubernetes import (
    LABEL_ATTEMPT,
    LABEL_RUN,
    JobApi,
    KubernetesSettings,
)
from tickwarden.triggers.kubernetes_retries import RetryJobLauncher
from tickwarden.triggers.kubernetes_tick import run_attempt, run_tick

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
PUBLISHED = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TICK = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)

FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: nightly
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 2 * * *"}
    steps: [{name: load, kind: python, call: "tests.steps:fail"}]
"""


@pytest.fixture(autouse=True)
def signing_key(monkeypatch):
    monkeypatch.setenv("TICKWARDEN_SECRET_KEY", SECRET)


def failed_first_attempt(db, tmp_path: Path) -> int:
    """Publish a nightly workflow whose step fails, run its 02:00 tick once, and queue the retry."""
    path = tmp_path / "acme.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, PUBLISHED)
    with db.transaction() as store:
        sid = store.catalog.get_schedule_for_workflow(store.catalog.get_workflow_by_name("acme", "nightly").id).id
    first = run_tick(db, sid, TICK, VirtualClock(TICK + timedelta(seconds=1)), "tick@pod")
    assert first.finished is not None and first.finished.run_status == "pending_retry"
    OutcomePoller(db, "p1").run_once(TICK + timedelta(seconds=5))
    (run,) = catalog.list_runs(db, "acme", "nightly")
    assert run.status == "queued" and run.attempts_count == 2
    return run.id


def launcher(db, cluster, settings) -> RetryJobLauncher:
    return RetryJobLauncher(db, JobApi(cluster.api_client(), NAMESPACE), settings)


def test_a_retry_attempt_gets_one_job_tagged_with_its_run_and_attempt(db, cluster, settings, tmp_path):
    run_id = failed_first_attempt(db, tmp_path)
    replicas = [launcher(db, cluster, settings) for _ in range(2)]
    later = TICK + timedelta(minutes=10)
    for replica in replicas:
        replica.run_once(later)
    (name,) = cluster.jobs()
    job = cluster.jobs()[name]
    attempt_id = int(job["metadata"]["labels"][LABEL_ATTEMPT])
    assert name == f"tickwarden-a{attempt_id}" and job["metadata"]["labels"][LABEL_RUN] == str(run_id)
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["tick", "--attempt", str(attempt_id)]
    assert replicas[0].last.launched == [attempt_id] and replicas[1].last.launched == []
    # the Job's pod runs exactly that attempt, on the worker's path
    outcome = run_attempt(db, attempt_id, VirtualClock(later + timedelta(seconds=3)), "retry@pod")
    assert outcome.status == "leased" and outcome.finished is not None
    assert outcome.attempt.number == 2 and outcome.finished.run_status == "pending_retry"
    # a pod started twice for it finds nothing left to run
    assert run_attempt(db, attempt_id, VirtualClock(later), "retry@pod-2").status == "refused"


def test_the_retry_launcher_is_a_loop_only_when_retries_run_as_jobs(db, cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("TICKWARDEN_TRIGGER", "kubernetes")
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig(tmp_path / "kubeconfig")))
    monkeypatch.setenv("TICKWARDEN_KUBERNETES_NAMESPACE", NAMESPACE)
    assert "retry-jobs" not in {loop.name for loop in build_loops(db, "r1")}
    monkeypatch.setenv("TICKWARDEN_KUBERNETES_RETRIES", "jobs")
    assert "retry-jobs" in {loop.name for loop in build_loops(db, "r1")}
    monkeypatch.setenv("TICKWARDEN_KUBERNETES_RETRIES", "sometimes")
    with pytest.raises(InvalidInput, match="TICKWARDEN_KUBERNETES_RETRIES must be pool or jobs"):
        KubernetesSettings.from_environ()


def test_the_attempt_mode_of_the_tick_command_goes_alone():
    done = subprocess.run([str(BIN), "tick", "--attempt", "3", "--schedule", "4"], check=False, capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "TICKWARDEN_DATABASE_URL": "postgresql://127.0.0.1:1/none"})
    assert done.returncode == 2 and "--attempt goes alone" in done.stderr and "Traceback" not in done.stderr
