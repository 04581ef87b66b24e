"""The control plane on the command line: apply, run-now, pause, resume, runs, workflows (real subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
pytestmark = pytest.mark.slow


@pytest.fixture
def cli(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path)}
    env.pop("TICKWARDEN_SCHEMA", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    return run


def assert_one_line_error(result: subprocess.CompletedProcess[str], contains: str) -> None:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert contains in lines[0], lines[0]


def test_apply_then_run_now_then_runs_json(cli):
    first = cli("apply", str(QUICKSTART), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["created"] == 6
    again = cli("apply", str(QUICKSTART), "--json")
    assert json.loads(again.stdout)["unchanged"] == 6 and json.loads(again.stdout)["created"] == 0
    assert json.loads(cli("runs", "acme/quickstart", "--json").stdout) == []
    queued = cli("run-now", "acme/quickstart", "--by", "ops@acme.test", "--json")
    assert queued.returncode == 0, queued.stderr
    runs = json.loads(cli("runs", "acme/quickstart", "--json", "--limit", "5").stdout)
    assert len(runs) == 1
    run = runs[0]
    assert run["manual"] is True and run["status"] == "queued" and run["attempts"] == 1
    assert set(run) >= {"scheduled_for", "manual", "status", "recovered", "attempts", "finished_at", "error"}
    assert run["scheduled_for"].endswith("Z") and run["finished_at"] is None


def test_pause_resume_and_workflows_json(cli):
    assert cli("apply", str(QUICKSTART)).returncode == 0
    paused = cli("pause", "acme/quickstart")
    assert paused.returncode == 0 and "paused" in paused.stdout
    listed = json.loads(cli("workflows", "acme", "--json").stdout)
    assert [(w["name"], w["schedule"]["status"], w["schedule"]["cron"]) for w in listed] == [
        ("quickstart", "paused", "* * * * *")]
    assert cli("resume", "acme/quickstart").returncode == 0
    assert json.loads(cli("workflows", "--json").stdout)[0]["schedule"]["status"] == "active"
    table = cli("runs", "acme/quickstart")
    assert table.returncode == 0 and "scheduled_for" in table.stdout


def test_bad_input_is_one_line_on_stderr_and_exit_status_1(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUICKSTART.read_text().replace("depends_on: [extract, check]", "depends_on: [extract, chek]"))
    assert_one_line_error(cli("apply", str(bad)), "bad.yaml: workflows[0].steps[2].depends_on: unknown step 'chek'.")
    broken = tmp_path / "broken.yaml"
    broken.write_text("tenants: [\n")
    assert_one_line_error(cli("apply", str(broken)), "broken.yaml: YAML syntax error")
    assert_one_line_error(cli("apply", str(tmp_path / "missing.yaml")), "missing.yaml: no such file.")
    assert cli("apply", str(QUICKSTART)).returncode == 0
    assert_one_line_error(cli("runs", "acme"), "Expected TENANT/WORKFLOW")
    assert_one_line_error(cli("run-now", "acme/nope"), "Tenant 'acme' has no workflow named 'nope'.")
    assert_one_line_error(cli("pause", "initech/quickstart"), "No tenant named 'initech'.")
    assert_one_line_error(cli("workflows", "initech"), "No tenant named 'initech'.")


def test_apply_dry_run_prints_the_changes_and_changes_nothing(cli):
    planned = cli("apply", str(QUICKSTART), "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert "+ workflow" in planned.stdout and "acme/quickstart" in planned.stdout
    assert "nothing was changed" in planned.stdout
    assert json.loads(cli("workflows", "--json").stdout) == []
    assert cli("apply", str(QUICKSTART)).returncode == 0
    assert cli("pause", "acme/quickstart").returncode == 0
    again = cli("apply", str(QUICKSTART), "--dry-run", "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["dry_run"] is True and report["updated"] == 1
    assert report["changes"] == [{"kind": "schedule", "name": "acme/quickstart", "change": "updated"}]
    assert "acme/quickstart is paused; this file resumes it" in again.stderr
    assert json.loads(cli("workflows", "--json").stdout)[0]["schedule"]["status"] == "paused"


def test_run_now_wait_reports_the_verdict_or_gives_up_after_the_timeout(cli, schema, tmp_path):
    assert cli("apply", str(QUICKSTART)).returncode == 0
    gave_up = cli("run-now", "acme/quickstart", "--wait", "--timeout", "1")
    assert gave_up.returncode == 3 and "is still queued after 1 s" in gave_up.stderr
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path)}
    env.pop("TICKWARDEN_SCHEMA", None)
    log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen([str(BIN), "worker", "--poll", "0.2"], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        waited = cli("run-now", "acme/quickstart", "--wait", "--timeout", "50", "--json")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()
    assert waited.returncode == 0, (waited.stdout, waited.stderr, (tmp_path / "worker.log").read_text())
    assert json.loads(waited.stdout)["status"] == "succeeded"


def test_cancel_stops_a_queued_run_records_the_actor_and_refuses_twice(cli):
    assert cli("apply", str(QUICKSTART)).returncode == 0
    queued = json.loads(cli("run-now", "acme/quickstart", "--json").stdout)
    done = cli("cancel", str(queued["id"]), "--by", "oncall", "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["status"], body["cancelled_by"]) == ("cancelled", "oncall")
    assert json.loads(cli("runs", "acme/quickstart", "--json").stdout)[0]["status"] == "cancelled"
    assert_one_line_error(cli("cancel", str(queued["id"])), "already cancelled")
    unknown = cli("cancel", "999999")
    assert unknown.returncode != 0 and "no run 999999" in unknown.stderr and "Traceback" not in unknown.stderr
    usage = cli("cancel", "abc")
    assert usage.returncode == 2 and "not a number" in usage.stderr and "Traceback" not in usage.stderr
