"""A run's lease is a heap-only update (migration 0042): no index of the runs names the status, and the
runs' partitions keep room on their pages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from tests.dbutil import TEST_URL, drop_schema, make_schema, upgrade_before
from tests.execution_helpers import make_runnable, python_step, queue_run
from tickwarden import migrate
from tickwarden.store.queries import queries

NOW = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)

# The metrics as they read the runs before 0042: the open runs by status, each tenant's newest success.
OLD_IN_FLIGHT = ("SELECT status, count(*) AS n FROM runs"
                 " WHERE status IN ('queued', 'running', 'pending_retry') GROUP BY status")
OLD_TENANT_LAST_SUCCESS = ("SELECT t.id AS tenant_id,"
                           "       (SELECT r.finished_at FROM runs r WHERE r.tenant_id = t.id AND r.status = 'succeeded'"
                           "         ORDER BY r.finished_at DESC LIMIT 1) AS last_success_at"
                           "  FROM tenants t ORDER BY t.id")


def _hot_updates(conn: psycopg.Connection) -> tuple[int, int]:
    """The updates and heap-only updates of the runs' partitions so far in this transaction."""
    row = conn.execute("SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0)"
                       "  FROM pg_stat_xact_user_tables"
                       " WHERE schemaname = current_schema() AND relname LIKE 'runs%%'").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_lease_moves_its_run_to_running_as_a_heap_only_update(db, clock):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=5 - i), clock.now()) for i in range(2)]
    with db.transaction() as store:
        before = _hot_updates(store.conn)
        leased = store.ledger.lease_attempts_with_ticks("w1", clock.now(), 60, limit=2)
        after = _hot_updates(store.conn)
        statuses = store.conn.execute("SELECT status FROM runs WHERE id = ANY(%s) ORDER BY id",
                                      ([r.id for r in runs],)).fetchall()
    assert [a.run_id for a, _ in leased] == [r.id for r in runs]
    assert statuses == [("running",), ("running",)]
    assert (after[0] - before[0], after[1] - before[1]) == (2, 2)  # both runs moved, neither wrote an index


def _index_defs(conn: psycopg.Connection, name: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid"
        " WHERE c.relnamespace = to_regnamespace(current_schema()) AND c.relname LIKE %s ORDER BY 1",
        (name,)).fetchall()]


def _fillfactors(conn: psycopg.Connection) -> dict[str, list[str] | None]:
    return dict(conn.execute(
        "SELECT c.relname, c.reloptions FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'runs'::regclass").fetchall())


def test_migrating_keeps_the_rows_and_the_metrics_read_the_same_without_the_status_indexes() -> None:
    """0042 keeps every run, names no status in any index of the runs (the open runs' deadline index says
    finished_at IS NULL, the tenants' success index is gone), fills the runs' partitions to 75 %, present
    and future, and the in-flight and last-success metrics answer as they did from the old indexes."""
    name = make_schema("mig")
    everything = migrate.available_migrations()
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            upgrade_before(conn, 42, NOW)
            conn.execute("SELECT tickwarden_ledger_partition(%s)", (NOW,))
            conn.execute("INSERT INTO tenants (name, display_name, created_at)"
                         " VALUES ('acme', 'Acme', %(now)s), ('globex', 'Globex', %(now)s), ('idle', 'Idle', %(now)s)",
                         {"now": NOW})
            conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                         " SELECT t.id, w, %s, %s FROM tenants t, unnest(ARRAY['a', 'b']) w", (NOW, NOW))
            # runs this month (its partition) and two months ago (the DEFAULT partition), open and closed
            conn.execute(
                "INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,"
                " attempts_count, deadline_at, created_at, finished_at)"
                " SELECT w.tenant_id, w.id, %(now)s - r.ago, false, r.status, 0, 1, %(now)s - r.ago + interval '1 hour',"
                "        %(now)s - r.ago, CASE WHEN r.took IS NOT NULL THEN %(now)s - r.ago + r.took END"
                "   FROM workflows w JOIN tenants t ON t.id = w.tenant_id JOIN (VALUES"
                "        ('acme', 'a', interval '60 days', 'succeeded', interval '3 hours'),"
                "        ('acme', 'a', interval '3 hours', 'succeeded', interval '1 minute'),"
                "        ('acme', 'b', interval '2 hours', 'succeeded', interval '5 minutes'),"
                "        ('acme', 'a', interval '1 hour', 'failed', interval '1 minute'),"
                "        ('acme', 'a', interval '10 minutes', 'running', NULL),"
                "        ('acme', 'b', interval '10 minutes', 'pending_retry', NULL),"
                "        ('globex', 'a', interval '59 days', 'succeeded', interval '1 minute'),"
                "        ('globex', 'a', interval '58 days', 'queued', NULL),"
                "        ('globex', 'b', interval '1 minute', 'queued', NULL),"
                "        ('globex', 'b', interval '2 hours', 'missed', interval '3 hours'),"
                "        ('idle', 'a', interval '1 hour', 'cancelled', interval '1 minute')"
                "   ) AS r (tenant, workflow, ago, status, took) ON r.tenant = t.name AND r.workflow = w.name",
                {"now": NOW})
            conn.commit()
            conn.execute("SET tickwarden.platform = 'on'")
            in_flight = sorted(conn.execute(OLD_IN_FLIGHT).fetchall())
            last_success = conn.execute(OLD_TENANT_LAST_SUCCESS).fetchall()
            assert any("WHERE (status = " in d for d in _index_defs(conn, "runs%"))
            conn.rollback()

            assert [m.version for m in migrate.upgrade(conn, NOW)] == [m.version for m in everything if m.version >= 42]
            conn.execute("SET tickwarden.platform = 'on'")
            assert conn.execute("SELECT count(*) FROM runs").fetchone() == (11,)
            defs = _index_defs(conn, "runs%")
            assert not [d for d in defs if "status" in d]
            deadline = [d for d in defs if "btree (deadline_at" in d]  # (deadline_at, id) since 0047
            assert len(deadline) == 3 and all(d.endswith("WHERE (finished_at IS NULL)") for d in deadline)
            assert not [d for d in defs if "(tenant_id, finished_at DESC)" in d]
            conn.execute("SELECT tickwarden_ledger_partition(%s)", (NOW + timedelta(days=40),))
            fills = _fillfactors(conn)
            assert len(fills) == 3 and all(options == ["fillfactor=75"] for options in fills.values()), fills

            assert sorted(conn.execute(queries()["api_metrics_runs_in_flight"]).fetchall()) == in_flight
            assert in_flight == [("pending_retry", 1), ("queued", 2), ("running", 1)]
            assert conn.execute(queries()["api_metrics_tenant_last_success"]).fetchall() == last_success
            assert [r[1] for r in last_success] == [NOW - timedelta(hours=2) + timedelta(minutes=5),
                                                    NOW - timedelta(days=59) + timedelta(minutes=1), None]
            conn.rollback()
    finally:
        drop_schema(name)
