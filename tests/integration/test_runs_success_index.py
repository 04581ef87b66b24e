"""The runs keep no success index (migration 0040): a workflow's newest success is workflow_successes' row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from tests.dbutil import TEST_URL, drop_schema, make_schema, upgrade_before
from tickwarden import migrate
from tickwarden.store.queries import queries

NOW = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)

# The dashboard's newest success as it read the runs before 0040, through the success index.
OLD_LAST_SUCCESS = ("SELECT r.id, r.scheduled_for, r.finished_at FROM runs r"
                    " WHERE r.workflow_id = %(workflow_id)s AND r.status = 'succeeded'"
                    " ORDER BY r.scheduled_for DESC LIMIT 1")


def test_migrating_drops_the_index_and_the_dashboard_reads_the_same_newest_success() -> None:
    """0040 keeps every run, drops the success index from the runs and each month, and the dashboard's
    newest success of each workflow is the run the runs themselves name, before and after."""
    name = make_schema("mig")
    everything = migrate.available_migrations()
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            upgrade_before(conn, 40, NOW)
            conn.execute("SELECT tickwarden_ledger_partition(%s)", (NOW,))
            conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'Acme', %s)", (NOW,))
            conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                         " SELECT id, w, %s, %s FROM tenants, unnest(ARRAY['a', 'b', 'c']) w", (NOW, NOW))
            # a: successes in two months (the newer tick finished first), then a failure; b: failures only;
            # c: a success last month only
            conn.execute(
                "INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,"
                " attempts_count, deadline_at, created_at, finished_at)"
                " SELECT w.tenant_id, w.id, %(now)s - r.ago, false, r.status, 0, 1, %(now)s, %(now)s - r.ago,"
                "        %(now)s - r.ago + r.took"
                "   FROM workflows w JOIN (VALUES"
                "        ('a', interval '40 days', 'succeeded', interval '3 hours'),"
                "        ('a', interval '2 hours', 'succeeded', interval '1 minute'),"
                "        ('a', interval '3 hours', 'succeeded', interval '2 hours'),"
                "        ('a', interval '1 hour', 'failed', interval '1 minute'),"
                "        ('b', interval '1 hour', 'failed', interval '1 minute'),"
                "        ('c', interval '35 days', 'succeeded', interval '1 minute')"
                "   ) AS r (workflow, ago, status, took) ON r.workflow = w.name",
                {"now": NOW})
            conn.commit()
            workflows = dict(conn.execute("SELECT name, id FROM workflows").fetchall())

            def indexes() -> set[str]:
                return {r[0] for r in conn.execute(
                    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                    " WHERE i.indrelid IN (SELECT oid FROM pg_class WHERE relname LIKE 'runs%%'"
                    "                       AND relnamespace = to_regnamespace(current_schema()))"
                    "   AND pg_get_indexdef(i.indexrelid) LIKE '%%status = ''succeeded''%%'"
                    "   AND pg_get_indexdef(i.indexrelid) LIKE '%%(workflow_id, scheduled_for DESC)%%'")}

            assert len(indexes()) >= 3  # the parent's and each partition's copy
            conn.execute("SET tickwarden.platform = 'on'")
            before = {w: conn.execute(OLD_LAST_SUCCESS, {"workflow_id": i}).fetchone() for w, i in workflows.items()}
            conn.rollback()

            assert [m.version for m in migrate.upgrade(conn, NOW)] == [m.version for m in everything if m.version >= 40]
            assert indexes() == set()
            assert conn.execute("SELECT count(*) FROM runs").fetchone() == (6,)
            conn.execute("SET tickwarden.platform = 'on'")
            after = {w: conn.execute(queries()["dashboard_last_success"], {"workflow_id": i}).fetchone()
                     for w, i in workflows.items()}
            assert after == before
            assert after["a"] is not None and after["a"][1] == NOW - timedelta(hours=2)
            assert after["b"] is None
            assert after["c"] is not None and after["c"][1] == NOW - timedelta(days=35)
            conn.rollback()
    finally:
        drop_schema(name)
