"""The ledger's keys to the catalog (migration 0039): a run's and an attempt's tenant is their workflow's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.dbutil import TEST_URL, drop_schema, make_schema, upgrade_before
from tests.helpers import create_run, make_workflow
from tickwarden import migrate
from tickwarden.db import Database

NOW = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)

RUN = ("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget, attempts_count,"
       " deadline_at, created_at) VALUES (%s, %s, %s, true, 'queued', 0, 1, %s, %s) RETURNING id")
ATTEMPT = ("INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, queued_at)"
           " VALUES (%s, %s, %s, %s, 2, 'queued', %s)")


def test_a_run_or_an_attempt_whose_tenant_is_not_its_workflows_is_refused(db: Database) -> None:
    ours = make_workflow(db, NOW)
    theirs = make_workflow(db, NOW, tenant="globex")
    with pytest.raises(psycopg.errors.ForeignKeyViolation), db.transaction() as store:
        store.conn.execute(RUN, (theirs.tenant_id, ours.id, NOW, NOW + timedelta(hours=1), NOW))
    run = create_run(db, ours, NOW, NOW)
    with pytest.raises(psycopg.errors.ForeignKeyViolation), db.transaction() as store:
        store.conn.execute(ATTEMPT, (theirs.tenant_id, ours.id, run.id, run.scheduled_for, NOW))
    with pytest.raises(psycopg.errors.ForeignKeyViolation), db.transaction() as store:
        store.conn.execute(RUN, (ours.tenant_id, ours.id + theirs.id, NOW, NOW + timedelta(hours=1), NOW))


def test_deleting_a_workflow_or_its_tenant_takes_their_runs_and_attempts(db: Database) -> None:
    first = make_workflow(db, NOW)
    second = make_workflow(db, NOW, tenant="globex")
    for wf in (first, second):
        create_run(db, wf, NOW, NOW)

    def ledger() -> list[tuple]:
        with db.transaction() as store:
            return store.conn.execute(
                "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM attempts),"
                " (SELECT count(*) FROM attempt_queue)").fetchall()

    assert ledger() == [(2, 2, 2)]
    with db.transaction() as store:
        store.conn.execute("DELETE FROM workflows WHERE id = %s", (first.id,))
    assert ledger() == [(1, 1, 1)]
    with db.transaction() as store:
        store.conn.execute("DELETE FROM tenants WHERE id = %s", (second.tenant_id,))
    assert ledger() == [(0, 0, 0)]


def test_migrating_keys_the_runs_and_attempts_already_there_by_their_workflow() -> None:
    """0039 keeps the ledger's rows, replaces each table's keys to tenants and to workflows with
    one to the workflow by (id, tenant_id), and from then on refuses a tenant that is not the workflow's."""
    name = make_schema("mig")
    everything = migrate.available_migrations()

    def keys(conn: psycopg.Connection) -> list[tuple]:
        return conn.execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype = 'f' AND conparentid = 0 AND conrelid IN ('runs'::regclass, 'attempts'::regclass)"
            " ORDER BY 1, 2").fetchall()

    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            upgrade_before(conn, 39, NOW)
            conn.execute("SELECT tickwarden_ledger_partition(%s)", (NOW,))
            conn.execute("INSERT INTO tenants (name, display_name, created_at)"
                         " VALUES ('acme', 'Acme', %s), ('globex', 'Globex', %s)", (NOW, NOW))
            conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                         " SELECT id, 'nightly', %s, %s FROM tenants", (NOW, NOW))
            conn.execute("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,"
                         " attempts_count, deadline_at, created_at)"
                         " SELECT tenant_id, id, s, false, 'queued', 0, 1, s + interval '1 hour', s FROM workflows,"
                         " unnest(ARRAY[%s, %s]::timestamptz[]) s", (NOW, NOW + timedelta(days=40)))
            conn.execute("INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status,"
                         " queued_at) SELECT tenant_id, workflow_id, id, scheduled_for, 1, 'queued', created_at FROM runs")
            conn.commit()
            assert {(t, f) for t, f, _ in keys(conn)} == {("runs", "tenants"), ("runs", "workflows"),
                                                        ("attempts", "tenants"), ("attempts", "workflows")}

            assert [m.version for m in migrate.upgrade(conn, NOW)] == [m.version for m in everything if m.version >= 39]
            assert keys(conn) == [
                ("attempts", "workflows",
                 "FOREIGN KEY (workflow_id, tenant_id) REFERENCES workflows(id, tenant_id) ON DELETE CASCADE"),
                ("runs", "workflows",
                 "FOREIGN KEY (workflow_id, tenant_id) REFERENCES workflows(id, tenant_id) ON DELETE CASCADE"),
            ]
            assert conn.execute("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM attempts),"
                                " (SELECT count(*) FROM attempt_queue)").fetchone() == (4, 4, 4)
            with pytest.raises(psycopg.errors.ForeignKeyViolation):
                conn.execute("UPDATE runs SET tenant_id = (SELECT max(id) FROM tenants)"
                             " WHERE tenant_id = (SELECT min(id) FROM tenants)")
            conn.rollback()
            conn.execute("DELETE FROM tenants WHERE name = 'acme'")
            assert conn.execute("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM attempts),"
                                " (SELECT count(*) FROM attempt_queue)").fetchone() == (2, 2, 2)
            conn.rollback()
    finally:
        drop_schema(name)
