"""Test databases: a real PostgreSQL, one migrated schema per test, reused once emptied."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from datetime import datetime

import psycopg
import pytest
from psycopg import sql

from tickwarden import migrate

TEST_URL = os.environ.get("TICKWARDEN_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
_counter = itertools.count()


def make_schema(prefix: str = "t") -> str:
    """Create an empty, uniquely named schema and return its name."""
    name = _unique_name(prefix)
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    return name


class SchemaPool:
    """Migrated schemas handed from one test to the next, each emptied in between.

    Migrating a fresh schema costs about a second of catalog work and dropping it as much
    again, which dominated the suite. A released schema is reused only when it is exactly as
    the migrations left it: every table emptied and every sequence restarted in one
    transaction, and the catalog fingerprint (tables, columns, policies, functions, triggers,
    grants, independent of the schema's name and of object ids: a foreign key's internal triggers
    are named by oid, so they are left out) equal to the one taken after migrating. Anything
    else (a test that added an object, a table still locked by a straggler) is dropped instead.
    Between tests a pooled schema is renamed, so a connection left behind by a finished test
    (its search_path names the old schema) finds nothing rather than the next test's rows.
    """

    def __init__(self) -> None:
        self._idle: list[str] = []
        self._fingerprint: str | None = None
        self._partitions: set[str] = set()  # the ledger's month partitions the migrations create

    def acquire(self, migrate: Callable[[str], None]) -> str:
        if self._idle:
            pooled, name = self._idle.pop(), _unique_name("t")
            with psycopg.connect(TEST_URL, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(pooled), sql.Identifier(name))
                )
            return name
        name = make_schema()
        migrate(name)
        if self._fingerprint is None:
            with psycopg.connect(TEST_URL, autocommit=True) as conn:
                self._fingerprint = _fingerprint(conn, name)
                self._partitions = set(_partitions(conn, name))
        return name

    def release(self, name: str) -> None:
        try:
            with psycopg.connect(TEST_URL, autocommit=True) as conn:
                with conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '2s'")
                    # Months a test's clock made the ledger create go again, so the schema is as migrated.
                    extra = [t for t in _partitions(conn, name) if t not in self._partitions]
                    if extra:
                        # One statement, as retention drops a month: its tables reference each other.
                        conn.execute(
                            sql.SQL("DROP TABLE {}").format(sql.SQL(", ").join(sql.Identifier(name, t) for t in extra))
                        )
                    tables = [
                        row[0]
                        for row in conn.execute(
                            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = %s::regnamespace"
                            " AND c.relkind IN ('r', 'p') AND c.relname <> 'schema_migrations'",
                            (name,),
                        )
                    ]
                    # DELETE, not TRUNCATE: a few rows each, and TRUNCATE's new files cost ten times more.
                    # Replica mode skips the foreign-key triggers, since every table is emptied anyway.
                    conn.execute("SET LOCAL session_replication_role = replica")
                    conn.execute(
                        sql.SQL("").join(sql.SQL("DELETE FROM {};").format(sql.Identifier(name, t)) for t in tables)
                    )
                    # Statistics a test gathered (ANALYZE, VACUUM, CREATE INDEX) go with its rows: analyzed
                    # now, in the transaction that deleted them, those tables count none, as migrated.
                    stale = [
                        row[0]
                        for row in conn.execute(
                            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = %s::regnamespace"
                            " AND c.relkind IN ('r', 'p') AND c.reltuples > 0",
                            (name,),
                        )
                    ]
                    if stale:
                        conn.execute(
                            sql.SQL("ANALYZE {}").format(sql.SQL(", ").join(sql.Identifier(name, t) for t in stale))
                        )
                    conn.execute(
                        "SELECT setval(format('%%I.%%I', schemaname, sequencename)::regclass, start_value, false)"
                        " FROM pg_sequences WHERE schemaname = %s",
                        (name,),
                    )
                    if _fingerprint(conn, name) != self._fingerprint:
                        raise _Changed
                    pooled = _unique_name("pool")
                    conn.execute(
                        sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(name), sql.Identifier(pooled))
                    )
        except (psycopg.Error, _Changed):
            drop_schema(name)
            return
        self._idle.append(pooled)

    def close(self) -> None:
        while self._idle:
            drop_schema(self._idle.pop())


def _partitions(conn: psycopg.Connection, name: str) -> list[str]:
    """The names of the schema's partitions (the ledger's months)."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relispartition"
        " AND c.relkind IN ('r', 'p')"
        " ORDER BY c.relname",
        (name,),
    ).fetchall()
    return [row[0] for row in rows]


class _Changed(Exception):
    """The schema no longer matches what the migrations produce."""


def _fingerprint(conn: psycopg.Connection, name: str) -> str:
    row = conn.execute(
        """
        SELECT md5(concat_ws('|',
          (SELECT string_agg(concat_ws(':', c.relname, c.relkind, c.relowner, c.relrowsecurity, c.relforcerowsecurity,
                                       coalesce(c.relacl::text, '')), ',' ORDER BY c.relname)
             FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace),
          (SELECT string_agg(concat_ws(':', c.relname, a.attname, ty.typname, a.attnotnull,
                                       pg_get_expr(d.adbin, d.adrelid)), ',' ORDER BY c.relname, a.attnum)
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
             -- a column's type by name: the ledger's domains (migration 0043) are the schema's own,
             -- under other object ids in each schema migrated
             JOIN pg_type ty ON ty.oid = a.atttypid
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE c.relnamespace = %(ns)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped),
          (SELECT string_agg(concat_ws(':', c.relname, p.polname, p.polcmd, pg_get_expr(p.polqual, p.polrelid)),
                             ',' ORDER BY c.relname, p.polname)
             FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = %(ns)s::regnamespace),
          (SELECT string_agg(concat_ws(':', p.proname, md5(p.prosrc)), ',' ORDER BY p.proname, md5(p.prosrc))
             FROM pg_proc p WHERE p.pronamespace = %(ns)s::regnamespace),
          (SELECT string_agg(concat_ws(':', c.relname, t.tgname, t.tgenabled), ',' ORDER BY c.relname, t.tgname)
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            WHERE c.relnamespace = %(ns)s::regnamespace AND NOT t.tgisinternal)
        ))
        """,
        {"ns": name},
    ).fetchone()
    assert row is not None
    return str(row[0])


def _unique_name(prefix: str) -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    return f"{prefix}_{worker}_{os.getpid()}_{next(_counter)}"


def drop_schema(name: str) -> None:
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def make_database(prefix: str = "tenantdb") -> str:
    """Create a separate, empty database (a tenant's own) and return its URL."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    name = f"{prefix}_{worker}_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    return TEST_URL.rsplit("/", 1)[0] + "/" + name


def drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def upgrade_before(conn: psycopg.Connection, version: int, now: datetime) -> None:
    """Apply only the migrations numbered below `version`: the schema as a deployment had it
    before that migration, for a test to fill with rows and then `migrate.upgrade` the rest."""
    everything = migrate.available_migrations()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(migrate, "available_migrations", lambda: [m for m in everything if m.version < version])
        migrate.upgrade(conn, now)
