"""`tickwarden maintenance` through the real CLI: add, list and remove; bad input is one sentence, exit 2."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import publish
from tests.dbutil import TEST_URL

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"


@pytest.fixture
def cli(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path), "COLUMNS": "220"}

    def run(*args):
        return subprocess.run([str(BIN), *args], cwd=ROOT, env=env, capture_output=True, check=False, text=True,
                              timeout=60)

    return run


@pytest.fixture
def fleet(db, clock):
    with db.transaction() as store:
        tenant = store.catalog.upsert_tenant("acme", clock.now())
        publish(store, tenant.id, "nightly", clock.now())


def test_windows_are_added_listed_and_removed(cli, fleet):
    one_off = cli("maintenance", "add", "acme/nightly", "--start", "2026-12-01T01:00:00Z",
                  "--end", "2026-12-01T03:00:00Z", "--note", "warehouse move", "--json")
    assert one_off.returncode == 0, one_off.stderr
    made = json.loads(one_off.stdout)
    assert (made["tenant"], made["workflow"], made["start"], made["end"]) == (
        "acme", "nightly", "2026-12-01T01:00:00Z", "2026-12-01T03:00:00Z")
    recurring = cli("maintenance", "add", "acme", "--cron", "0 2 * * 6", "--duration", "90m",
                    "--timezone", "Europe/Berlin")
    assert recurring.returncode == 0, recurring.stderr
    assert recurring.stdout.startswith("Added maintenance window ") and "every workflow" in recurring.stdout
    listed = json.loads(cli("maintenance", "list", "acme", "--json").stdout)
    assert [(w["workflow"], w["cron"], w["duration_seconds"]) for w in listed] == [
        ("nightly", None, None), (None, "0 2 * * 6", 5400)]
    table = cli("maintenance", "list")
    assert table.returncode == 0 and "acme/nightly" in table.stdout and "0 2 * * 6 (Europe/Berlin) for 90m" in table.stdout
    removed = cli("maintenance", "remove", str(made["id"]))
    assert removed.returncode == 0 and f"Removed maintenance window {made['id']}" in removed.stdout
    assert len(json.loads(cli("maintenance", "list", "--json").stdout)) == 1
    gone = cli("maintenance", "remove", str(made["id"]))
    assert gone.returncode == 1 and gone.stderr.strip() == f"tickwarden: There is no maintenance window {made['id']}."


@pytest.mark.parametrize(("args", "fragment"), [
    (["--start", "2026-12-01T03:00:00Z", "--end", "2026-12-01T01:00:00Z"], "end must be after its start"),
    (["--start", "2026-12-01T01:00:00", "--end", "2026-12-01T03:00:00Z"], "UTC offset"),
    (["--start", "soon", "--end", "2026-12-01T03:00:00Z"], "is not a time"),
    (["--cron", "0 1 * * *"], "needs a start and an end, or a cron expression and a duration"),
    (["--cron", "0 25 * * *", "--duration", "1h"], "cron"),
    (["--cron", "0 1 * * *", "--duration", "1h", "--timezone", "Mars/Base"], "cron"),
    (["--cron", "0 1 * * *", "--duration", "a while"], "not a length of time"),
    (["--start", "2026-12-01T01:00:00Z", "--end", "2026-12-01T03:00:00Z", "--cron", "0 1 * * *"], "not both"),
])
def test_bad_input_is_one_sentence_and_exit_2_and_stores_nothing(cli, fleet, args, fragment):
    done = cli("maintenance", "add", "acme/nightly", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tickwarden: ") and fragment in lines[0]
    assert "Traceback" not in done.stderr
    assert json.loads(cli("maintenance", "list", "--json").stdout) == []


def test_a_target_that_is_not_tenant_or_tenant_slash_workflow_exits_2(cli, fleet):
    done = cli("maintenance", "add", "acme/nightly/extra", "--cron", "0 1 * * *", "--duration", "1h")
    assert done.returncode == 2 and "is not TENANT or TENANT/WORKFLOW" in done.stderr


def test_an_unknown_workflow_is_one_sentence(cli, fleet):
    done = cli("maintenance", "add", "acme/missing", "--cron", "0 1 * * *", "--duration", "1h")
    assert done.returncode == 1 and done.stderr.strip() == "tickwarden: There is no workflow acme/missing."
