"""The ledger's single-column rules as domain constraints (migration 0043): the same rules,
no table CHECK rebuilt at every statement for them."""

from __future__ import annotations

import psycopg
import pytest

from tests.dbutil import TEST_URL, drop_schema, make_schema, upgrade_before
from tests.helpers import create_run, make_workflow
from tests.integration.test_retention import YEAR_START
from tickwarden import migrate
from tickwarden.db import Database

# Each single-column rule the ledger's tables had as a CHECK, each rule between a status and
# its finish (rewritten by the same migration), and a write that breaks it.
BROKEN = [
    "UPDATE runs SET finished_at = created_at",  # a queued run has no finish
    "UPDATE attempts SET finished_at = queued_at",  # nor a queued attempt
    "UPDATE runs SET status = 'exploded'",
    "UPDATE runs SET retry_budget = -1",
    "UPDATE runs SET attempts_count = -1",
    "UPDATE runs SET lost_requeues = -1",
    "UPDATE runs SET rows = -1",
    "UPDATE runs SET cancelled_by = repeat('x', 255)",
    "UPDATE runs SET requested_by = repeat('x', 255)",  # migration 0044
    "UPDATE attempts SET status = 'exploded'",
    "UPDATE attempts SET number = 0",
    "UPDATE attempts SET rows = -1",
    "UPDATE attempts SET error_category = 'Not A Category'",
    "INSERT INTO attempt_steps (attempt_id, run_scheduled_for, tenant_id, step, position, status, log)"
    " SELECT id, run_scheduled_for, tenant_id, 'load', 0, 'exploded', '' FROM attempts",
    # the other row rules, one function's CHECK a table since migration 0045
    "UPDATE runs SET recovered = true",  # only a succeeded run is recovered
    "UPDATE runs SET status = 'succeeded'",  # a verdict has a finish
    "UPDATE attempts SET status = 'running'",  # a running attempt has a lease
    "UPDATE attempts SET lease_expires_at = queued_at",  # and only a running one
    "UPDATE attempts SET status = 'lost'",  # a verdict has a finish
]

# The table CHECKs left: the rules that relate two columns of a row, and an attempt's number,
# one call of a function a table (migration 0045: a call's node text is a fraction of the rules').
ROW_RULES = {
    "runs": ["CHECK (tickwarden_run_row_rules((status)::text, finished_at, recovered)) NOT VALID"],
    "attempts": ["CHECK (tickwarden_attempt_row_rules((status)::text, number, finished_at, lease_expires_at))"
                 " NOT VALID"],
    "attempt_steps": [],
}


def table_checks(conn: psycopg.Connection, table: str) -> list[str]:
    """The CHECK constraints of `table` (the partitioned parent), their expressions sorted."""
    return sorted(row[0] for row in conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c'",
        (table,)))


def column_domains(conn: psycopg.Connection, table: str) -> dict[str, str]:
    """The columns of `table` whose type is a domain, and that domain's constraint."""
    return dict(conn.execute(
        "SELECT a.attname, pg_get_constraintdef(c.oid) FROM pg_attribute a"
        "  JOIN pg_type t ON t.oid = a.atttypid AND t.typtype = 'd'"
        "  JOIN pg_constraint c ON c.contypid = t.oid"
        " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped", (table,)).fetchall())


def workflow_before(conn: psycopg.Connection, version: int) -> None:
    """The schema as it was before migration `version`, with one tenant, one workflow and its month."""
    upgrade_before(conn, version, YEAR_START)
    conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'Acme', %s)", (YEAR_START,))
    conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                 " SELECT id, 'w', %s, %s FROM tenants", (YEAR_START, YEAR_START))
    conn.execute("SELECT tickwarden_ledger_partition(%s)", (YEAR_START,))


@pytest.mark.parametrize("statement", BROKEN)
def test_every_rule_moved_or_rewritten_still_refuses_a_value_that_breaks_it(db: Database, clock, statement: str) -> None:
    workflow = make_workflow(db, clock.now())
    create_run(db, workflow, clock.now(), clock.now())
    with pytest.raises(psycopg.errors.CheckViolation), db.transaction() as store:
        store.conn.execute(statement)


def test_the_ledgers_tables_keep_only_their_row_rules_as_checks(db: Database) -> None:
    """PostgreSQL 15 reads back, plans and compiles every CHECK of a table at each statement that
    writes it; a domain's constraints are compiled once a session. Only the rules relating two
    columns (and an attempt's number) remain table CHECKs, one a table: a call of the function
    that holds them, whose node text is a fraction of theirs (migration 0045)."""
    with db.transaction() as store:
        for table, rules in ROW_RULES.items():
            assert table_checks(store.conn, table) == sorted(rules), table
        assert column_domains(store.conn, "runs") == {
            "status": "CHECK ((VALUE = ANY (ARRAY['queued'::text, 'running'::text, 'pending_retry'::text,"
                      " 'succeeded'::text, 'failed'::text, 'missed'::text, 'cancelled'::text]))) NOT VALID",
            "retry_budget": "CHECK ((VALUE >= 0)) NOT VALID",
            "attempts_count": "CHECK ((VALUE >= 0)) NOT VALID",
            "lost_requeues": "CHECK ((VALUE >= 0)) NOT VALID",
            "rows": "CHECK ((VALUE >= 0)) NOT VALID",
            "cancelled_by": "CHECK ((length(VALUE) <= 254)) NOT VALID",
            "requested_by": "CHECK ((length(VALUE) <= 254)) NOT VALID",
        }
        assert set(column_domains(store.conn, "attempts")) == {"status", "rows", "error_category"}
        assert set(column_domains(store.conn, "attempt_steps")) == {"status"}


def test_migrating_a_populated_ledger_rewrites_no_month_and_new_months_keep_the_rules() -> None:
    name = make_schema("dom")
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            workflow_before(conn, 43)
            conn.execute(
                """
                INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,
                                  deadline_at, created_at, finished_at, rows, cancelled_by)
                SELECT w.tenant_id, w.id, %(t0)s + g * interval '1 hour', 'succeeded', 2, 1,
                       %(t0)s + g * interval '1 hour', %(t0)s, %(t0)s + g * interval '1 hour', g, NULL
                  FROM workflows w, generate_series(0, 47) g
                """, {"t0": YEAR_START})
            conn.execute("""INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status,
                                                  queued_at, finished_at, rows, error_category)
                            SELECT tenant_id, workflow_id, id, scheduled_for, 1, status, scheduled_for, finished_at,
                                   rows, 'step_error' FROM runs""")
            # The months' tables and indexes, but the running leases' partial index (its predicate names
            # the status: rebuilt, it holds the running attempts alone) and the open runs' deadline
            # index (built again with its tiebreaker by migration 0047).
            files = ("SELECT relname, relfilenode FROM pg_class WHERE relname ~ '^(runs|attempts|attempt_steps)_p'"
                     " AND relname !~ '(lease_expires_at|deadline_at(_id)?)_idx$' ORDER BY 1")
            before = {"files": conn.execute(files).fetchall(),
                      "runs": conn.execute("SELECT * FROM runs ORDER BY id").fetchall(),
                      "attempts": conn.execute("SELECT * FROM attempts ORDER BY id").fetchall()}
            conn.commit()

            applied = migrate.upgrade(conn, YEAR_START)
            assert 43 in [m.version for m in applied]
            # No month was rewritten (its files are the same), and every row reads as it did.
            assert before["files"] and conn.execute(files).fetchall() == before["files"]
            assert conn.execute("SELECT * FROM runs ORDER BY id").fetchall() == before["runs"]
            assert conn.execute("SELECT * FROM attempts ORDER BY id").fetchall() == before["attempts"]
            # The triggers dropped to move the columns are back: a success is noted, a queued attempt queued.
            assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid IN ('runs'::regclass, 'attempts'::regclass)"
                                " AND tgname IN ('runs_note_success', 'attempt_queue_moved', 'attempt_queue_removed')"
                                ).fetchone() == (3,)
            # A month made after the migration has the domains' columns, and so the rules.
            later = YEAR_START.replace(month=3)
            conn.execute("SELECT tickwarden_ledger_partition(%s)", (later,))
            assert column_domains(conn, "runs_p202503") == column_domains(conn, "runs")
            assert column_domains(conn, "attempts_p202503") == column_domains(conn, "attempts")
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget,"
                             " deadline_at, created_at) SELECT tenant_id, id, %s, 'queued', -1, %s, %s FROM workflows",
                             (later, later, later))
            conn.rollback()
            conn.execute("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, deadline_at,"
                         " created_at, finished_at) SELECT tenant_id, id, %s, 'succeeded', 0, %s, %s, %s FROM workflows",
                         (later, later, later, later))
            assert conn.execute("SELECT scheduled_for FROM workflow_successes").fetchall() == [(later,)]
            conn.rollback()
    finally:
        drop_schema(name)


def test_a_requester_stored_longer_before_migration_0044_stays_and_its_run_can_still_be_updated() -> None:
    """The requester's bound is NOT VALID on the domain: no month is rewritten or scanned, a run
    kept from before with a longer requester reads and updates as before, and every requester
    written from then on is tested."""
    name = make_schema("req")
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            workflow_before(conn, 44)
            conn.execute("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,"
                         " deadline_at, created_at, requested_by)"
                         " SELECT tenant_id, id, %(t)s, true, 'queued', 0, %(t)s, %(t)s, repeat('r', 300) FROM workflows",
                         {"t": YEAR_START})
            # the months' tables and indexes, but the open runs' deadline index (built again with its
            # tiebreaker by migration 0047)
            files = ("SELECT relname, relfilenode FROM pg_class WHERE relname ~ '^runs_p'"
                     " AND relname !~ 'deadline_at(_id)?_idx$' ORDER BY 1")
            before = conn.execute(files).fetchall()
            conn.commit()

            assert 44 in [m.version for m in migrate.upgrade(conn, YEAR_START)]
            assert before and conn.execute(files).fetchall() == before
            assert conn.execute("SELECT length(requested_by) FROM runs").fetchone() == (300,)
            conn.execute("UPDATE runs SET rows = 3")  # carries the old requester over: not tested
            assert conn.execute("SELECT rows, length(requested_by) FROM runs").fetchone() == (3, 300)
            conn.commit()
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute("UPDATE runs SET requested_by = repeat('r', 300)")
            conn.rollback()
            conn.execute("UPDATE runs SET requested_by = 'acme:ops'")
            assert column_domains(conn, "runs")["requested_by"] == "CHECK ((length(VALUE) <= 254)) NOT VALID"
    finally:
        drop_schema(name)
