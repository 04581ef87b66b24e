"""`tickwarden checkin` and `checkin-url` as real subprocesses: reports, the URL, and bad input exiting 2."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.dbutil import TEST_URL

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
pytestmark = pytest.mark.slow

FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: export
    kind: external
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "*/5 * * * *"}
  - name: nightly
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 2 * * *"}
    steps: [{name: load, kind: python, call: "tickwarden.examples_steps:noop"}]
"""


@pytest.fixture
def cli(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path)}
    env.pop("TICKWARDEN_SCHEMA", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    return run


@pytest.fixture
def applied(cli, schema, tmp_path):
    path = tmp_path / "external.yaml"
    path.write_text(FILE)
    result = cli("apply", str(path))
    assert result.returncode == 0, result.stderr
    # Published an hour ago, so that the newest due tick is one the schedule already had.
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema} -c tickwarden.platform=on") as conn:
        conn.execute("UPDATE schedules SET published_at = published_at - interval '1 hour',"
                     " created_at = created_at - interval '1 hour'")
    return path


def assert_usage_error(result: subprocess.CompletedProcess[str], contains: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert contains in lines[0], lines[0]


def test_start_then_fail_with_exit_code_and_log(cli, applied, tmp_path):
    started = cli("checkin", "acme/export", "start", "--json")
    assert started.returncode == 0, started.stderr
    body = json.loads(started.stdout)
    assert body["run_status"] == "running" and body["tick"][14:] in {f"{m:02d}:00Z" for m in range(0, 60, 5)}
    log = tmp_path / "job.log"
    log.write_text("x" * 40_000 + "\nexport failed: token=sk_live_abcdefghijklmnop1234\n")
    failed = cli("checkin", "acme/export", "fail", "--tick", body["tick"], "--exit-code", "4",
                 "--log-file", str(log), "--json")
    assert failed.returncode == 0, failed.stderr
    assert json.loads(failed.stdout)["run_status"] == "failed"
    runs = json.loads(cli("runs", "acme/export", "--json").stdout)
    assert runs[0]["status"] == "failed" and "exit code 4" in runs[0]["error"]
    shown = cli("runs", "show", str(body["run_id"]), "--json").stdout
    assert "sk_live_abcdefghijklmnop1234" not in shown
    again = cli("checkin", "acme/export", "success", "--tick", body["tick"])
    assert again.returncode == 1 and "already failed" in again.stderr


def test_bad_input_prints_one_sentence_and_exits_2(cli, applied, tmp_path):
    assert_usage_error(cli("checkin", "acme/export", "done"), "start, success or fail")
    assert_usage_error(cli("checkin", "acme-export", "start"), "TENANT/WORKFLOW")
    assert_usage_error(cli("checkin", "acme/export", "start", "--tick", "yesterday"), "ISO 8601")
    assert_usage_error(cli("checkin", "acme/export", "start", "--tick", "2026-11-30T02:03:00Z"), "not a tick")
    assert_usage_error(cli("checkin", "acme/export", "start", "--tick", "2999-01-01T00:00:00Z"), "future")
    assert_usage_error(cli("checkin", "acme/export", "fail", "--exit-code", "-1"), "exit code")
    assert_usage_error(cli("checkin", "acme/export", "fail", "--log-file", str(tmp_path / "missing.log")),
                       "no such log file")
    assert_usage_error(cli("checkin", "acme/nightly", "start"), "kind external")
    unknown = cli("checkin", "acme/nope", "start")
    assert unknown.returncode == 1 and "no workflow named 'nope'" in unknown.stderr


def test_checkin_url_is_shown_once_and_rotates(cli, applied):
    first = cli("checkin-url", "acme/export", "--base-url", "https://tw.example.com/", "--json")
    assert first.returncode == 0, first.stderr
    url = json.loads(first.stdout)["url"]
    assert url.startswith("https://tw.example.com/ping/") and len(url.rsplit("/", 1)[1]) >= 40
    again = cli("checkin-url", "acme/export")
    assert again.returncode == 1 and "--rotate" not in again.stdout and "already has a check-in URL" in again.stderr
    rotated = cli("checkin-url", "acme/export", "--rotate", "--json")
    assert rotated.returncode == 0 and json.loads(rotated.stdout)["url"].rsplit("/", 1)[1] != url.rsplit("/", 1)[1]
    assert_usage_error(cli("checkin-url", "acme/export", "--base-url", "ftp://x"), "http")


def test_a_file_giving_an_external_workflow_steps_is_refused(cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(FILE.replace("    kind: external\n", "    kind: external\n    steps: [{name: a, kind: python, "
                                 "call: \"m:f\"}]\n"))
    result = cli("apply", str(path))
    assert result.returncode == 1 and "an external workflow has no steps" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
