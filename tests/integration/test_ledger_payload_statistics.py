"""ANALYZE leaves the ledger's payload columns alone (migration 0046): statistics target 0 on every
partition, present and future, and no statistics gathered for them; the columns statements join on
keep theirs."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg

from tests.dbutil import TEST_URL, drop_schema, make_schema, upgrade_before
from tickwarden import migrate

NOW = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)

PAYLOAD = {
    "runs": ["error", "requested_by", "cancelled_by"],
    "attempts": ["error", "log_tail", "outputs"],
    "attempt_steps": ["error", "log", "output"],
}


def _targets(conn: psycopg.Connection, table: str) -> dict[str, int]:
    """Each user column of `table` (this schema's) -> its statistics target (-1: the default)."""
    return {name: int(target) for name, target in conn.execute(
        "SELECT attname, attstattarget FROM pg_attribute"
        " WHERE attrelid = format('%%I.%%I', current_schema(), %s::text)::regclass AND attnum > 0 AND NOT attisdropped",
        (table,)).fetchall()}


def _partitions(conn: psycopg.Connection, parent: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = format('%%I.%%I', current_schema(), %s::text)::regclass ORDER BY 1", (parent,)).fetchall()]


def _assert_payload_unsampled(conn: psycopg.Connection, table: str, columns: list[str]) -> None:
    targets = _targets(conn, table)
    assert {c: targets[c] for c in columns} == dict.fromkeys(columns, 0), table
    assert all(t == -1 for c, t in targets.items() if c not in columns), (table, targets)  # the rest: the default


def test_every_ledger_partition_present_and_future_skips_the_payload_columns_in_analyze() -> None:
    """Migrating a schema that holds a month's partition gives it, the DEFAULT partitions and the parents
    target 0 on the payload columns; a month `tickwarden_ledger_partition` creates afterwards gets them
    too; and an ANALYZE of a month with rows in every column gathers statistics for every other column
    (`failed_step`, which the step lookups join on, among them) and none for the payload."""
    name = make_schema("paystats")
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            upgrade_before(conn, 48, NOW)
            conn.execute("SELECT tickwarden_ledger_partition(%s)", (NOW,))
            migrate.upgrade(conn, NOW)
            assert conn.execute("SELECT tickwarden_ledger_partition(%s)",
                                (datetime(2026, 4, 1, tzinfo=UTC),)).fetchone() == (True,)
            for parent, columns in PAYLOAD.items():
                months = _partitions(conn, parent)
                assert months == [f"{parent}_default", f"{parent}_p202603", f"{parent}_p202604"]
                for table in [parent, *months]:
                    _assert_payload_unsampled(conn, table, columns)

            conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'Acme', %s)", (NOW,))
            conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                         " SELECT id, 'a', %s, %s FROM tenants", (NOW, NOW))
            conn.execute(
                "INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget, attempts_count,"
                "                  deadline_at, created_at, finished_at, error_category, error, failed_step)"
                " SELECT w.tenant_id, w.id, %(at)s + make_interval(mins => g), false, 'failed', 0, 1,"
                "        %(at)s + make_interval(mins => g + 5), %(at)s, %(at)s + make_interval(mins => g + 1),"
                "        'step_failed', 'boom ' || g, 'fetch'"
                "   FROM workflows w, generate_series(1, 200) g",
                {"at": datetime(2026, 4, 2, tzinfo=UTC)})
            conn.execute("ANALYZE runs_p202604")
            analyzed = {r[0] for r in conn.execute(
                "SELECT a.attname FROM pg_statistic s JOIN pg_attribute a ON a.attrelid = s.starelid"
                " AND a.attnum = s.staattnum WHERE s.starelid = 'runs_p202604'::regclass").fetchall()}
            assert {"status", "scheduled_for", "error_category", "failed_step"} <= analyzed
            assert not analyzed & set(PAYLOAD["runs"])
            conn.rollback()
    finally:
        drop_schema(name)
