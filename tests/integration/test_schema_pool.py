"""The test schema pool hands a schema on after a test whose clock made the ledger create months.

Migrating a fresh schema costs seconds; a pooled one is emptied and reused only when it is as the
migrations left it. A test on a clock far from the migrations' makes the ledger create its months
(`tickwarden_ledger_partition`): those go again on release, so the schema stays reusable.
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg

from tests.conftest import _migrate
from tests.dbutil import TEST_URL, SchemaPool


def _months(schema: str) -> set[str]:
    with psycopg.connect(TEST_URL) as conn:
        rows = conn.execute("SELECT c.relname FROM pg_class c WHERE c.relnamespace = %s::regnamespace"
                            " AND c.relispartition AND c.relkind = 'r'", (schema,)).fetchall()
    return {r[0] for r in rows}


def test_a_schema_whose_ledger_grew_months_is_emptied_and_reused_as_migrated() -> None:
    pool = SchemaPool()
    try:
        first = pool.acquire(_migrate)
        migrated = _months(first)
        with psycopg.connect(TEST_URL, options=f"-c search_path={first}") as conn:
            for at in (datetime(2031, 5, 3, tzinfo=UTC), datetime(2019, 2, 1, tzinfo=UTC)):
                assert conn.execute("SELECT tickwarden_ledger_partition(%s)", (at,)).fetchone()[0] is True
            conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'Acme', %s)",
                         (datetime(2031, 5, 3, tzinfo=UTC),))
        assert {"runs_p203105", "attempts_p203105", "attempt_steps_p203105"} <= _months(first) - migrated
        pool.release(first)
        assert len(pool._idle) == 1, "the schema went back to the pool"
        second = pool.acquire(lambda name: (_ for _ in ()).throw(AssertionError("migrated again")))
        assert _months(second) == migrated
        with psycopg.connect(TEST_URL, options=f"-c search_path={second}") as conn:
            assert conn.execute("SELECT count(*) FROM tenants").fetchone()[0] == 0
        pool.release(second)
    finally:
        pool.close()


def test_a_schema_migrated_after_a_changed_one_was_dropped_is_reused_too() -> None:
    pool = SchemaPool()
    try:
        changed = pool.acquire(_migrate)
        with psycopg.connect(TEST_URL, options=f"-c search_path={changed}") as conn:
            conn.execute("CREATE TABLE added_by_a_test (id int)")
        pool.release(changed)
        assert pool._idle == [], "a schema a test added to is dropped, not pooled"
        # A second migration makes the same schema under other object ids (its foreign keys'
        # internal triggers are named by them): it must still count as the migrations' own.
        fresh = pool.acquire(_migrate)
        pool.release(fresh)
        assert len(pool._idle) == 1
    finally:
        pool.close()


def _reltuples(schema: str) -> dict[str, float]:
    with psycopg.connect(TEST_URL) as conn:
        rows = conn.execute("SELECT c.relname, c.reltuples FROM pg_class c WHERE c.relnamespace = %s::regnamespace"
                            " AND c.relname IN ('tenants', 'runs')", (schema,)).fetchall()
    return dict(rows)


def test_a_schema_goes_back_without_the_statistics_its_test_gathered() -> None:
    pool = SchemaPool()
    try:
        first = pool.acquire(_migrate)
        with psycopg.connect(TEST_URL, options=f"-c search_path={first}") as conn:
            conn.execute("INSERT INTO tenants (name, display_name, created_at)"
                         " SELECT 't' || g, 't', %s FROM generate_series(1, 300) g", (datetime(2026, 1, 1, tzinfo=UTC),))
            conn.execute("ANALYZE tenants")
        assert _reltuples(first)["tenants"] == 300
        pool.release(first)
        second = pool.acquire(lambda name: (_ for _ in ()).throw(AssertionError("migrated again")))
        assert all(n <= 0 for n in _reltuples(second).values()), "no table counts rows a test left"
        pool.release(second)
    finally:
        pool.close()
