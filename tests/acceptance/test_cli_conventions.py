"""The command line behaves like a conventional one: usage errors, --version, pipes, terminals, colour."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL
from tests.integration.pipeline import DAILY, fail, tick, workflow
from tickwarden.models import AttemptOutcome
from tickwarden.poller import OutcomePoller

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[(?:[0-9]+;)*(?:3[0-8]|9[0-7])[;m]")
MARKER = "duplicate row '[value]' in table [bold]x[/bold]"


@pytest.fixture
def env(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path)}
    for name in ("TICKWARDEN_SCHEMA", "NO_COLOR", "FORCE_COLOR", "COLUMNS"):
        env.pop(name, None)
    return env


def cli(env, *args):
    return subprocess.run([str(BIN), *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=60)


def on_terminal(env, *args, columns=80, **extra):
    """Run the CLI with its stdout on a pseudo-terminal `columns` wide; return what it printed."""
    leader, follower = pty.openpty()
    child = subprocess.Popen([str(BIN), *args], cwd=ROOT, env={**env, "COLUMNS": str(columns), "TERM": "xterm",
                                                               **extra},
                             stdout=follower, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert child.wait(timeout=60) == 0, child.stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture
def failed_run(db, clock):
    wf = workflow(db, clock.now(), cadence=DAILY)
    poller = OutcomePoller(db, "p1")
    tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail("step_error", MARKER)] * 4, clock)
    with db.transaction() as store:
        (run,) = store.ledger.list_runs(wf.id)
        (view,) = store.monitoring.list_alerts()
    return run, view.alert.id


def test_it_exits_2_with_typers_usage_message_on_an_unknown_option(env):
    done = cli(env, "runs", "--no-such-option")
    assert done.returncode == 2
    assert "No such option: --no-such-option" in done.stderr and "Usage:" in done.stderr
    assert "unexpected" not in done.stderr and "Traceback" not in done.stderr


def test_it_exits_2_on_a_missing_argument(env):
    done = cli(env, "pause")
    assert done.returncode == 2 and "Missing argument" in done.stderr


def test_it_prints_its_version():
    from tickwarden import __version__

    done = subprocess.run([str(BIN), "--version"], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"tickwarden {__version__}"


def test_runs_prints_redaction_markers_literally_with_id_and_duration_in_a_pipe(env, failed_run):
    run, _ = failed_run
    done = cli(env, "runs", "acme/nightly")
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    assert header.split("\t")[:6] == ["id", "scheduled_for", "manual", "status", "attempts", "duration"]
    cells = row.split("\t")
    assert cells[0] == str(run.id) and cells[3] == "failed" and cells[5] == format_seconds(run)
    assert cells[-1] == MARKER


def format_seconds(run):
    from tickwarden.messages import format_duration

    return format_duration(int((run.finished_at - run.started_at).total_seconds()))


def test_alerts_show_prints_redaction_markers_literally(env, failed_run):
    _, alert_id = failed_run
    noted = cli(env, "alerts", "note", str(alert_id), "saw '[value]' again")
    assert noted.returncode == 0, noted.stderr
    shown = cli(env, "alerts", "show", str(alert_id))
    assert shown.returncode == 0, shown.stderr
    flat = " ".join(shown.stdout.split())
    assert "saw '[value]' again" in flat and "duplicate row '[value]' in table" in flat


def test_runs_show_and_logs_print_one_run_and_its_attempts(env, db, clock, failed_run):
    run, _ = failed_run
    shown = cli(env, "runs", "show", str(run.id), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["id"] == run.id and data["workflow"] == "acme/nightly" and len(data["attempts"]) == run.attempts_count
    assert data["duration_seconds"] == int((run.finished_at - run.started_at).total_seconds())
    logs = cli(env, "logs", str(run.id))
    assert logs.returncode == 0 and "--- attempt 1 (failed) ---" in logs.stdout
    missing = cli(env, "runs", "show", "999999")
    assert missing.returncode == 1 and missing.stderr.strip() == "tickwarden: There is no run 999999."


def test_tables_fit_an_80_column_terminal_and_colour_statuses(env, failed_run, db, clock):
    wf_ok = workflow(db, clock.now(), name="a-workflow-with-a-rather-long-name-indeed", cadence=DAILY)
    tick(db, OutcomePoller(db, "p1"), wf_ok, clock.now() + timedelta(days=1), [AttemptOutcome(status="succeeded")],
         clock)
    for args in (("runs", "acme/nightly"), ("workflows",), ("alerts",)):
        shown = on_terminal(env, *args)
        assert all(len(ANSI.sub("", line)) <= 80 for line in shown.splitlines()), shown
    coloured = on_terminal(env, "runs", "acme/nightly")
    assert COLOUR.search(coloured) and "failed" in ANSI.sub("", coloured)


def test_no_color_turns_colour_off_on_a_terminal(env, failed_run):
    plain = on_terminal(env, "runs", "acme/nightly", NO_COLOR="1")
    assert "failed" in ANSI.sub("", plain) and not COLOUR.search(plain)


def test_a_worker_asked_to_lease_more_than_it_may_hold_ahead_exits_2_in_one_sentence(env):
    done = cli(env, "worker", "--batch", "100000")
    assert done.returncode == 2
    assert "--batch between 0 and 100" in done.stderr and "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1
