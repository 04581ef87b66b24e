"""`tickwarden alerts`: list, show with history, reassign and note, through the real CLI."""

import json
import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL
from tests.integration.pipeline import DAILY, fail, tick, workflow
from tickwarden.poller import OutcomePoller

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"


@pytest.fixture
def cli(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path), "COLUMNS": "220"}

    def run(*args):
        return subprocess.run([str(BIN), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    return run


@pytest.fixture
def alert_id(db, clock):
    wf = workflow(db, clock.now(), cadence=DAILY)
    tick(db, OutcomePoller(db, "p1"), wf, clock.now() + timedelta(minutes=5),
         [fail("connection", "connection reset by peer")] * 4, clock)  # a daily tick: 1 + 3 retries
    with db.transaction() as store:
        (view,) = store.monitoring.list_alerts()
    return view.alert.id


def test_alerts_lists_shows_reassigns_and_notes(cli, alert_id):
    listed = cli("alerts", "--open", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["id"], row["tenant"], row["workflow"], row["severity"], row["owner"], row["failure_count"]) == (
        alert_id, "acme", "nightly", "critical", "engineering", 1)
    assert cli("alerts", "--tenant", "acme").stdout.count("nightly") == 1

    moved = cli("alerts", "reassign", str(alert_id), "--owner", "customer", "--note", "their warehouse is down",
                "--actor", "ana")
    assert moved.returncode == 0 and "customer" in moved.stdout
    noted = cli("alerts", "note", str(alert_id), "called them", "--actor", "ana")
    assert noted.returncode == 0, noted.stderr

    shown = json.loads(cli("alerts", "show", str(alert_id), "--json").stdout)
    assert shown["owner"] == "customer"
    assert [(e["kind"], e["actor"]) for e in shown["events"]] == [
        ("opened", "tickwarden"), ("reassigned", "ana"), ("noted", "ana")]
    assert shown["events"][1]["data"] == {"from": "engineering", "to": "customer"}
    text = cli("alerts", "show", str(alert_id))
    assert text.returncode == 0 and "engineering → customer" in text.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("alerts", "show", "abc"), "is not a number"),
        (("alerts", "show", "999"), "There is no alert 999."),
        (("alerts", "reassign", "1", "--owner", "bob"), "is not valid: use engineering or customer"),
        (("alerts", "note", "1", "   "), "The note is empty."),
        (("alerts", "--tenant", "nobody"), "There is no tenant 'nobody'."),
    ],
)
def test_bad_input_is_one_sentence_and_exit_1(cli, alert_id, args, message):
    result = cli(*args)
    assert result.returncode == 1
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_alerts_ack_snooze_internal_note_and_resolve_through_the_cli(cli, alert_id):
    acked = cli("alerts", "ack", str(alert_id), "--actor", "ana", "--json")
    assert acked.returncode == 0, acked.stderr
    assert json.loads(acked.stdout)["kind"] == "acknowledged"
    again = cli("alerts", "ack", str(alert_id))
    assert again.returncode == 1 and again.stderr.strip() == f"tickwarden: Alert {alert_id} is already acknowledged."
    snoozed = cli("alerts", "snooze", str(alert_id), "2h", "--json")
    assert snoozed.returncode == 0 and json.loads(snoozed.stdout)["data"]["until"].endswith("Z")
    bad = cli("alerts", "snooze", str(alert_id), "soon")
    assert bad.returncode == 1 and "Duration 'soon' is not valid" in bad.stderr
    internal = cli("alerts", "note", str(alert_id), "--internal", "DBA says table dropped", "--json")
    assert internal.returncode == 0 and json.loads(internal.stdout)["internal"] is True
    unexplained = cli("alerts", "resolve", str(alert_id))
    assert unexplained.returncode == 2 and "--note" in unexplained.stderr
    resolved = cli("alerts", "resolve", str(alert_id), "--note", "restored the table", "--actor", "ana")
    assert resolved.returncode == 0, resolved.stderr
    shown = json.loads(cli("alerts", "show", str(alert_id), "--json").stdout)
    assert shown["status"] == "resolved" and shown["acknowledged_by"] == "ana"
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds[-4:] == ["acknowledged", "snoozed", "noted", "resolved"]
