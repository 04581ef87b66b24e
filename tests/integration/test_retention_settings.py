"""A tenant's retention overrides: one write path from workflow files, the API and the CLI."""

from __future__ import annotations

import os
import subprocess
import textwrap
from datetime import datetime
from pathlib import Path

import pytest

from tests.apiutil import api, live_server, make_token
from tests.dbutil import TEST_URL
from tests.integration.pipeline import workflow
from tickwarden import catalog, retention
from tickwarden.db import Database
from tickwarden.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"

FILE = """
tenants:
  - name: acme
    retention: {{{retention}}}
users:
  - email: owner@acme.test
environments:
  - name: main
workflows:
  - name: nightly
    environment: main
    publisher: owner@acme.test
    schedule: {{cron: "0 2 * * *"}}
    steps:
      - {{name: load, kind: python, call: "tickwarden.examples_steps:extract"}}
"""


def policy_of(db: Database, tenant: str):
    with db.transaction() as store:
        return store.retention.get_policy(store.catalog.get_tenant_by_name(tenant).id)


def test_a_workflow_file_sets_and_replaces_a_tenants_retention(db: Database, tmp_path: Path, start: datetime) -> None:
    path = tmp_path / "acme.yaml"
    path.write_text(FILE.format(retention="logs_days: 3, payloads_days: 1"))
    catalog.apply_file(db, path, start)
    assert retention.effective_days(policy_of(db, "acme")) == {
        "metadata": 400, "logs": 3, "payloads": 1, "outbox": 30, "alerts": 400}
    path.write_text(FILE.format(retention="metadata_days: 90"))
    catalog.apply_file(db, path, start)
    assert retention.effective_days(policy_of(db, "acme")) == {
        "metadata": 90, "logs": 30, "payloads": 7, "outbox": 30, "alerts": 400}


@pytest.mark.parametrize(("setting", "message"), [
    ("logs_days: 0", "tenants[0].retention.logs_days"),
    ("metadata_days: 2", "tenants[0].retention.metadata_days"),
    ("forever: true", "tenants[0].retention.forever: unknown key"),
])
def test_a_workflow_file_refuses_a_bad_retention_in_one_sentence(db: Database, tmp_path: Path, start: datetime,
                                                                 setting: str, message: str) -> None:
    path = tmp_path / "acme.yaml"
    path.write_text(FILE.format(retention=setting))
    with pytest.raises(InvalidInput) as caught:
        catalog.apply_file(db, path, start)
    assert message in caught.value.message


def test_a_tenant_without_retention_in_its_file_keeps_its_overrides(db: Database, tmp_path: Path,
                                                                    start: datetime) -> None:
    path = tmp_path / "acme.yaml"
    path.write_text(FILE.format(retention="logs_days: 3"))
    catalog.apply_file(db, path, start)
    path.write_text(textwrap.dedent(FILE.format(retention="")).replace("    retention: {}\n", ""))
    catalog.apply_file(db, path, start)
    assert policy_of(db, "acme").logs_days == 3


def test_the_api_reads_and_replaces_a_tenants_retention(db: Database, start: datetime, clock) -> None:
    workflow(db, start, tenant="acme")
    workflow(db, start, tenant="globex")
    member = make_token(db, start, tenant="acme", name="alice")
    with live_server(db, clock) as base:
        client = api(base, member)
        assert client.get("/api/tenants/acme/retention").json()["days"] == retention.DEFAULT_DAYS
        put = client.put("/api/tenants/acme/retention", json={"payloads_days": 2})
        assert put.status_code == 200 and put.json()["days"]["payloads"] == 2
        assert put.json()["overrides"]["payloads"] == 2 and put.json()["overrides"]["logs"] is None
        assert client.put("/api/tenants/acme/retention", json={"metadata_days": 1}).status_code == 422
        assert client.put("/api/tenants/acme/retention", json={"keep": 1}).status_code == 422
        assert client.get("/api/tenants/globex/retention").status_code == 404
        assert client.put("/api/tenants/globex/retention", json={"logs_days": 1}).status_code == 404
    assert policy_of(db, "acme").payloads_days == 2
    assert policy_of(db, "globex") is None


def test_the_retention_command_shows_and_sets(db: Database, schema: str, tmp_path: Path, start: datetime) -> None:
    workflow(db, start, tenant="acme")
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path), "COLUMNS": "200"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN), *args], check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)

    done = cli("retention", "set", "acme", "--logs-days", "5")
    assert done.returncode == 0, done.stderr
    shown = cli("retention", "show", "acme", "--json")
    assert '"logs": 5' in shown.stdout
    bad = cli("retention", "set", "acme", "--metadata-days", "2")
    assert bad.returncode == 2 and bad.stderr.startswith("tickwarden: --metadata-days")
    assert len(bad.stderr.strip().splitlines()) == 1
    assert policy_of(db, "acme").logs_days == 5
