"""Erasure: a tenant, wholly; a person, from every text and json column of every table."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from psycopg import sql

from tests.helpers import lease
from tests.dbutil import TEST_URL
from tests.integration.pipeline import DAILY, create_tick, workflow
from tickwarden import alerts, catalog, erasure, secrets
from tickwarden.db import Database
from tickwarden.errors import InvalidInput, NotFound
from tickwarden.models import AttemptOutcome
from tickwarden.poller import OutcomePoller

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
EMAIL = "Alice.Liddell@Example.com"
NAME = "Alice Liddell"
OTHER = "bob@example.com"


def sql_rows(db: Database, query: str, *params: object) -> list[tuple]:
    with db.transaction() as store:
        return store.conn.execute(query, params).fetchall()


def occurrences(db: Database, schema: str, *needles: str) -> list[str]:
    """Every table.column of the schema (text, varchar, json, jsonb) holding any needle, in any case."""
    found = []
    with db.transaction() as store:
        columns = store.conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns c "
            "WHERE table_schema = %s AND data_type IN ('text', 'character varying', 'json', 'jsonb') "
            "AND EXISTS (SELECT 1 FROM information_schema.tables t WHERE t.table_schema = c.table_schema "
            "AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE') "
            "ORDER BY table_name, ordinal_position", (schema,)).fetchall()
        assert len(columns) > 40, "the search must cover every text column"
        for table, column in columns:
            for needle in needles:
                query = sql.SQL("SELECT count(*) FROM {} WHERE strpos(lower({}::text), %s) > 0").format(
                    sql.Identifier(table), sql.Identifier(column))
                if store.conn.execute(query, (needle.lower(),)).fetchone()[0]:
                    found.append(f"{table}.{column}")
    return sorted(found)  # information_schema has no order of its own: compare sets of columns


def populate(db: Database, now: datetime) -> dict[str, int]:
    """A database where the subject's address and name appear in every place a person can."""
    wf = workflow(db, now, tenant="acme", name="nightly", cadence=DAILY)
    other_tenant = workflow(db, now, tenant="globex", name="export", cadence=DAILY)
    with db.transaction() as store:
        alice = store.catalog.apply_user(wf.tenant_id, EMAIL, NAME, True, now).row
        alice_elsewhere = store.catalog.apply_user(other_tenant.tenant_id, EMAIL.lower(), NAME, True, now).row
        store.catalog.apply_user(wf.tenant_id, OTHER, "Bob Builder", True, now)
        conn = store.conn
        conn.execute("UPDATE workflows SET publisher_id = %s, description = %s WHERE id = %s",
                     (alice.id, f"owned by {NAME}", wf.id))
        conn.execute("UPDATE workflows SET publisher_id = %s WHERE id = %s", (alice_elsewhere.id, other_tenant.id))
        store.execution.ensure_default_environment(wf.tenant_id, now)
        conn.execute("UPDATE environments SET settings = %s::jsonb WHERE tenant_id = %s",
                     (json.dumps({"maintainer": EMAIL, "team": [NAME, "ops"]}), wf.tenant_id))
        store.outbox.upsert_notification_channel(tenant_id=wf.tenant_id, name="mail", kind="email", audience="customer",
                                          now=now, config={"to": [EMAIL.lower(), OTHER]})
        store.api.create_api_token(tenant_id=wf.tenant_id, role="member", name=f"token of {EMAIL}", token_hash="h" * 64,
                               now=now)
        manual = store.ledger.create_manual_run(tenant_id=wf.tenant_id, workflow_id=wf.id, retry_budget=0,
                                         deadline_at=now + timedelta(hours=1), now=now, requested_by=EMAIL)
        conn.execute("INSERT INTO loop_heartbeats (replica_id, loop, last_pass_at, last_error) "
                     "VALUES ('r1', 'poller', %s, %s)", (now, f"mail to {EMAIL} bounced"))
    run = create_tick(db, wf, now, now)
    with db.transaction() as store:
        for leased in lease(store, "w1", now, 600, limit=2):
            failed = AttemptOutcome(status="failed", error_category="step_error", retryable=False,
                                    error=f"no access for {EMAIL}", failed_step="load",
                                    log_tail=f"{NAME} <{EMAIL}> denied", outputs={"owner": EMAIL.upper()})
            store.ledger.finish_attempt(leased, "w1", failed, now + timedelta(minutes=1), steps=[
                {"step": "load", "position": 0, "status": "failed", "log": f"user {NAME} lacks rights",
                 "output": {"rows": [{"email": EMAIL, "other": OTHER}]}, "error": f"denied: {EMAIL}"}])
    OutcomePoller(db, "p1").run_once(now + timedelta(minutes=2))
    (alert_id,) = sql_rows(db, "SELECT id FROM alerts WHERE workflow_id = %s", wf.id)[0]
    alerts.reassign(db, alert_id, "customer", f"{NAME} owns this", f"acme:{EMAIL}", now + timedelta(minutes=3))
    alerts.add_note(db, alert_id, f"called {NAME} at {EMAIL}", "ops", now + timedelta(minutes=4))
    # An alert's actor is redacted of addresses when written, not of names: a token named after the subject.
    alerts.acknowledge(db, alert_id, f"acme:token of {NAME}", now + timedelta(minutes=4))
    # Rows written before capture-time redaction existed still carry the address.
    sql_rows(db, "UPDATE alert_events SET actor = %s, data = data || %s::jsonb WHERE kind = 'reassigned' "
                 "RETURNING id", f"acme:{EMAIL}", json.dumps({"by": NAME}))
    sql_rows(db, "UPDATE notification_outbox SET last_error = %s WHERE alert_id = %s RETURNING id",
             f"550 mailbox {EMAIL} unavailable", alert_id)
    # Cancelled through the API by a token named after the subject: its actor is `tenant:token name`.
    with db.transaction() as store:
        again = store.ledger.create_manual_run(tenant_id=wf.tenant_id, workflow_id=wf.id, retry_budget=0,
                                               deadline_at=now + timedelta(hours=2), now=now + timedelta(minutes=5),
                                               requested_by="ops")
    catalog.cancel(db, again.id, now + timedelta(minutes=6), f"acme:token of {NAME}")
    return {"workflow": wf.id, "run": run.id, "manual": manual.id, "alert": alert_id, "other": other_tenant.id}


def test_erase_subject_leaves_no_trace_of_the_address_or_name_in_any_column(db: Database, schema: str,
                                                                            start: datetime) -> None:
    ids = populate(db, start)
    before = occurrences(db, schema, EMAIL, NAME)
    for place in ("users.email", "users.display_name", "workflows.description", "environments.settings",
                  "notification_channels.config", "api_tokens.name", "runs.requested_by", "runs.error",
                  "attempts.error", "attempts.log_tail", "attempts.outputs", "attempt_steps.log",
                  "attempt_steps.output", "attempt_steps.error", "alert_events.actor", "runs.cancelled_by", "alerts.acknowledged_by",
                  "alert_events.note", "alert_events.data", "notification_outbox.last_error", "loop_heartbeats.last_error"):
        assert place in before, f"the fixture must put the subject in {place}"

    with db.transaction() as store:
        report = erasure.erase_subject(store, EMAIL.lower(), actor="dpo", now=start + timedelta(hours=1))
    assert occurrences(db, schema, EMAIL, NAME) == []
    assert report.counts["users"] == 2 and report.audit_id is not None

    # The rows stay, with their ids; the rest of what they said is intact.
    assert sql_rows(db, "SELECT count(*) FROM runs WHERE id = ANY(%s)", [ids["run"], ids["manual"]]) == [(2,)]
    (config,), = sql_rows(db, "SELECT config FROM notification_channels WHERE name = 'mail'")
    assert config == {"to": [OTHER]}, "the address leaves a recipient list; other recipients stay"
    (description,), = sql_rows(db, "SELECT description FROM workflows WHERE id = %s", ids["workflow"])
    assert description == "owned by [erased]"
    assert sql_rows(db, "SELECT active, email LIKE 'erased-%%@erased.invalid' FROM users "
                        "WHERE display_name = 'erased'") == [(False, True)] * 2
    assert sql_rows(db, "SELECT email FROM users WHERE email = %s", OTHER) == [(OTHER,)]

    (audit,) = sql_rows(db, "SELECT kind, target, actor, counts::text FROM erasure_audits")
    assert audit[:3] == ("subject", "subject", "dpo")
    assert "attempts.log_tail" in audit[3] and "alice" not in audit[3].lower()


def test_a_subject_dry_run_reports_the_same_counts_and_changes_nothing(db: Database, schema: str,
                                                                        start: datetime) -> None:
    populate(db, start)
    before = occurrences(db, schema, EMAIL, NAME)
    with db.transaction() as store:
        dry = erasure.erase_subject(store, EMAIL, actor="dpo", now=start, dry_run=True)
    assert occurrences(db, schema, EMAIL, NAME) == before
    assert sql_rows(db, "SELECT count(*) FROM erasure_audits") == [(0,)]
    with db.transaction() as store:
        real = erasure.erase_subject(store, EMAIL, actor="dpo", now=start)
    assert dry.counts == real.counts and dry.total > 15


def test_erase_subject_leaves_longer_addresses_and_unrelated_words_alone(db: Database, start: datetime) -> None:
    wf = workflow(db, start, tenant="acme", name="nightly", cadence=DAILY)
    with db.transaction() as store:
        store.catalog.apply_user(wf.tenant_id, "al@example.com", "Ali", True, start)
        store.conn.execute("UPDATE workflows SET description = %s WHERE id = %s",
                           ("mail xal@example.com or al@example.com.au; Alibaba, Ali.", wf.id))
        erasure.erase_subject(store, "al@example.com", actor="dpo", now=start)
    assert sql_rows(db, "SELECT description FROM workflows") == [
        ("mail xal@example.com or al@example.com.au; Alibaba, [erased].",)]


def test_a_name_is_erased_only_among_the_persons_own_tenants_and_the_address_everywhere(db: Database,
                                                                                       start: datetime) -> None:
    own = workflow(db, start, tenant="acme", name="nightly", cadence=DAILY)
    other = workflow(db, start, tenant="initech", name="report", cadence=DAILY)
    with db.transaction() as store:
        store.catalog.apply_user(own.tenant_id, EMAIL, "Ops", True, start)
        store.outbox.upsert_notification_channel(tenant_id=other.tenant_id, name="ops", kind="recording",
                                          audience="customer", now=start)
        for wf in (own, other):
            store.conn.execute("UPDATE workflows SET description = %s WHERE id = %s",
                               (f"ops team; mail {EMAIL}", wf.id))
        erasure.erase_subject(store, EMAIL, actor="dpo", now=start)
    assert sql_rows(db, "SELECT w.description FROM workflows w ORDER BY w.id") == [
        ("[erased] team; mail [erased]",), ("ops team; mail [erased]",)]
    assert sql_rows(db, "SELECT name FROM notification_channels") == [("ops",)]


def test_erase_tenant_removes_every_row_of_the_tenant_and_nothing_else(db: Database, start: datetime) -> None:
    ids = populate(db, start)
    with db.transaction() as store:
        tables = store.erasure.tenant_tables()
        (acme,) = [t.id for t in [store.catalog.get_tenant_by_name("acme")]]
    assert {"runs", "attempts", "attempt_steps", "alerts", "alert_events", "notification_threads",
            "notification_outbox", "api_tokens", "users", "retention_marks"} <= set(tables) | {"retention_marks"}
    populated = [t for t in tables if sql_rows(db, f"SELECT count(*) FROM {t} WHERE tenant_id = %s", acme)[0][0]]
    assert {"runs", "attempts", "alert_events", "notification_outbox", "api_tokens"} <= set(populated)
    with db.transaction() as store:
        dry = erasure.erase_tenant(store, "acme", actor="dpo", now=start, dry_run=True)
    assert dry.counts["runs"] == 3 and dry.counts["tenants"] == 1 and dry.audit_id is None
    assert sql_rows(db, "SELECT count(*) FROM tenants WHERE id = %s", acme) == [(1,)]

    with db.transaction() as store:
        report = erasure.erase_tenant(store, "acme", actor="dpo", now=start)
    assert report.counts == dry.counts
    for table in tables:
        assert sql_rows(db, f"SELECT count(*) FROM {table} WHERE tenant_id = %s", acme) == [(0,)], table
    assert sql_rows(db, "SELECT count(*) FROM tenants WHERE name = 'acme'") == [(0,)]
    assert sql_rows(db, "SELECT count(*) FROM workflows WHERE id = %s", ids["other"]) == [(1,)]
    (audit,) = sql_rows(db, "SELECT kind, target, actor, counts FROM erasure_audits")
    assert audit[:3] == ("tenant", f"tenant {acme}", "dpo") and audit[3]["runs"] == 3
    assert "acme" not in json.dumps(audit[3])


def test_erase_tenant_covers_a_tenant_table_added_later(db: Database, start: datetime) -> None:
    own = workflow(db, start, tenant="acme", name="nightly", cadence=DAILY)
    other = workflow(db, start, tenant="globex", name="report", cadence=DAILY)
    # As a later migration might add it: a restricting foreign key, and one table with none.
    with db.transaction() as store:
        store.conn.execute("CREATE TABLE tenant_vault_later (tenant_id bigint NOT NULL REFERENCES tenants (id)"
                           " ON DELETE RESTRICT, name text NOT NULL, value bytea NOT NULL)")
        store.conn.execute("CREATE TABLE tenant_notes (tenant_id bigint NOT NULL, body text)")
    for wf in (own, other):
        sql_rows(db, "INSERT INTO tenant_vault_later VALUES (%s, 'db', 'hunter2') RETURNING 1", wf.tenant_id)
        sql_rows(db, "INSERT INTO tenant_notes VALUES (%s, 'note') RETURNING 1", wf.tenant_id)
    with db.transaction() as store:
        report = erasure.erase_tenant(store, "acme", actor="dpo", now=start)
    assert report.counts["tenant_vault_later"] == 1 and report.counts["tenant_notes"] == 1
    assert sql_rows(db, "SELECT tenant_id FROM tenant_vault_later UNION ALL SELECT tenant_id FROM tenant_notes") == [
        (other.tenant_id,), (other.tenant_id,)]


def test_erase_tenant_removes_its_sealed_secrets_and_keeps_another_tenants(db: Database, start: datetime) -> None:
    own = workflow(db, start, tenant="acme", name="nightly", cadence=DAILY)
    other = workflow(db, start, tenant="globex", name="report", cadence=DAILY)
    keyring = secrets.Keyring("erasure-test-key")
    with db.transaction() as store:
        for wf in (own, other):
            secrets.set_secret(store, keyring, wf.tenant_id, "WAREHOUSE", "canary-warehouse-pw", start)
    with db.transaction() as store:
        dry = erasure.erase_tenant(store, "acme", actor="dpo", now=start, dry_run=True)
    assert dry.counts["tenant_secrets"] == 1
    assert sql_rows(db, "SELECT count(*) FROM tenant_secrets") == [(2,)]
    with db.transaction() as store:
        report = erasure.erase_tenant(store, "acme", actor="dpo", now=start)
    assert report.counts["tenant_secrets"] == 1
    assert sql_rows(db, "SELECT tenant_id FROM tenant_secrets") == [(other.tenant_id,)]


def test_erasure_refuses_unknown_tenants_and_malformed_subjects(db: Database, start: datetime) -> None:
    with db.transaction() as store, pytest.raises(NotFound):
        erasure.erase_tenant(store, "nobody", actor="dpo", now=start)
    with pytest.raises(InvalidInput):
        erasure.parse_subject("not an address")


@pytest.fixture
def cli(schema: str, tmp_path: Path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path), "COLUMNS": "200"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN), *args], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    return run


def test_the_erase_command_dry_runs_then_erases_through_the_cli(cli, db: Database, schema: str,
                                                               start: datetime) -> None:
    populate(db, start)
    dry = cli("erase", "--tenant", "acme", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "runs" in dry.stdout and "dry run: nothing was changed" in dry.stdout
    assert sql_rows(db, "SELECT count(*) FROM tenants WHERE name = 'acme'") == [(1,)]

    subject = cli("erase", "--subject", EMAIL, "--dry-run", "--json")
    assert subject.returncode == 0, subject.stderr
    assert json.loads(subject.stdout)["counts"]["users"] == 2
    assert EMAIL.lower() not in subject.stdout.lower()

    done = cli("erase", "--subject", EMAIL, "--actor", "dpo", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["audit_id"] is not None
    assert occurrences(db, schema, EMAIL, NAME) == []
    gone = cli("erase", "--tenant", "acme")
    assert gone.returncode == 0 and "recorded as erasure" in gone.stdout
    assert sql_rows(db, "SELECT count(*) FROM tenants WHERE name = 'acme'") == [(0,)]


@pytest.mark.parametrize("args", [["erase"], ["erase", "--tenant", "a", "--subject", "x@y"],
                                  ["erase", "--subject", "no-at-sign"]])
def test_the_erase_command_refuses_bad_usage_with_one_line_and_exit_2(cli, args: list[str]) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert result.stderr.startswith("tickwarden: ") and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_the_erase_command_says_an_unknown_tenant_in_one_line(cli) -> None:
    result = cli("erase", "--tenant", "nobody")
    assert result.returncode == 1 and result.stderr.strip() == "tickwarden: No tenant named 'nobody'."


def test_the_api_erases_for_the_platform_only(db: Database, schema: str, start: datetime, clock) -> None:
    from tests.apiutil import api, live_server, make_token

    populate(db, start)
    member = make_token(db, start, tenant="acme", name="alice")
    platform = make_token(db, start, name="dpo")
    with live_server(db, clock) as base:
        refused = api(base, member).post("/api/erasures", json={"subject": EMAIL, "dry_run": True})
        assert refused.status_code == 403 and refused.json()["detail"] == "Erasure needs a platform token."
        assert api(base, member).get("/api/erasures").status_code == 403
        both = api(base, platform).post("/api/erasures", json={"subject": EMAIL, "tenant": "acme"})
        assert both.status_code == 422
        bad = api(base, platform).post("/api/erasures", json={"subject": "nobody"})
        assert bad.status_code == 422 and "email address" in bad.json()["detail"]
        unknown = api(base, platform).post("/api/erasures", json={"tenant": "nobody"})
        assert unknown.status_code == 404

        dry = api(base, platform).post("/api/erasures", json={"subject": EMAIL, "dry_run": True})
        assert dry.status_code == 200 and dry.json()["audit_id"] is None and dry.json()["counts"]["users"] == 2
        done = api(base, platform).post("/api/erasures", json={"subject": EMAIL})
        assert done.status_code == 200, done.text
        assert done.json()["counts"] == dry.json()["counts"]
        audits = api(base, platform).get("/api/erasures").json()
        assert [(a["kind"], a["actor"]) for a in audits] == [("subject", "platform:dpo")]
    assert occurrences(db, schema, EMAIL, NAME) == []
