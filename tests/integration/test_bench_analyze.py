"""The benchmarks' fills analyze their own schema's tables, partitions included, and no other schema's."""

import uuid

import psycopg
from psycopg import sql

from benchmarks.common import analyze_schema
from tests.dbutil import TEST_URL


def _analyzed(conn: psycopg.Connection, schema: str) -> dict[str, int]:
    return dict(conn.execute("SELECT relname, analyze_count FROM pg_stat_user_tables WHERE schemaname = %s",
                             (schema,)).fetchall())


def test_only_the_connections_schema_is_analyzed():
    ours, other = (f"analyze_{uuid.uuid4().hex[:10]}" for _ in range(2))
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        try:
            for name in (ours, other):
                conn.execute(sql.SQL("CREATE SCHEMA {name}; SET search_path TO {name};"
                                     "CREATE TABLE plain (id int); INSERT INTO plain SELECT generate_series(1, 10);"
                                     "CREATE TABLE ledger (at int) PARTITION BY RANGE (at);"
                                     "CREATE TABLE ledger_low PARTITION OF ledger FOR VALUES FROM (0) TO (100);"
                                     "INSERT INTO ledger SELECT generate_series(1, 10)").format(name=sql.Identifier(name)))
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(ours)))
            analyze_schema(conn)
            assert _analyzed(conn, ours) == {"plain": 1, "ledger": 1, "ledger_low": 1}
            assert _analyzed(conn, other) == {"plain": 0, "ledger": 0, "ledger_low": 0}
        finally:
            for name in (ours, other):
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
