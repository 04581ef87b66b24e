"""Schema migrations: numbered plain-SQL files, applied once each, in order.

`migrations/NNNN_name.sql` are applied inside one transaction each, under an
advisory lock so that replicas starting together migrate once. The lock is keyed by
the schema: deployments in other schemas of the same database never wait on it. `schema.sql` is
the declared schema; a test proves that the migrations produce exactly it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import psycopg

from tickwarden.errors import MigrationError

# An arbitrary constant, hashed with the schema's name into the advisory lock a migrating process takes.
MIGRATION_LOCK_KEY = 7_402_118_661
MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    """Return the packaged migrations in version order."""
    found = []
    for entry in resources.files("tickwarden").joinpath("migrations").iterdir():
        match = MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError("Two migrations share a version number.")
    return found


def declared_schema() -> str:
    return resources.files("tickwarden").joinpath("schema.sql").read_text(encoding="utf-8")


def applied_versions(conn: psycopg.Connection) -> set[int]:
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()[0]
    if not exists:
        return set()
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def upgrade(conn: psycopg.Connection, now: datetime) -> list[Migration]:
    """Apply every migration not yet applied to the connection's schema; return those applied."""
    applied: list[Migration] = []
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(current_schema(), %s))", (MIGRATION_LOCK_KEY,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)"
            )
            done = applied_versions(conn)
            for migration in available_migrations():
                if migration.version in done:
                    continue
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, now),
                )
                applied.append(migration)
    except psycopg.Error as exc:
        raise MigrationError(f"The database schema could not be upgraded: {str(exc).splitlines()[0]}") from None
    return applied


def pending(conn: psycopg.Connection) -> list[Migration]:
    done = applied_versions(conn)
    return [m for m in available_migrations() if m.version not in done]


def describe_schema(conn: psycopg.Connection, schema: str) -> dict[str, Any]:
    """Return a comparable description of every object in `schema`.

    Columns, constraints, indexes, policies and row-security flags, with the
    schema name removed so that two schemas built differently can be compared.
    """

    def strip(text: str | None) -> str | None:
        return None if text is None else text.replace(f"{schema}.", "")

    columns = conn.execute(
        """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity
          FROM pg_attribute a
          JOIN pg_class c ON c.oid = a.attrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v') AND a.attnum > 0 AND NOT a.attisdropped
           AND c.relname <> 'schema_migrations'
         ORDER BY c.relname, a.attname
        """,
        (schema,),
    ).fetchall()
    constraints = conn.execute(
        """
        SELECT c.relname, pg_get_constraintdef(k.oid)
          FROM pg_constraint k
          JOIN pg_class c ON c.oid = k.conrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = %s AND c.relname <> 'schema_migrations'
         ORDER BY 1, 2
        """,
        (schema,),
    ).fetchall()
    indexes = conn.execute(
        """
        SELECT indexname, indexdef FROM pg_indexes
         WHERE schemaname = %s AND tablename <> 'schema_migrations' ORDER BY 1
        """,
        (schema,),
    ).fetchall()
    policies = conn.execute(
        "SELECT tablename, policyname, cmd, qual, with_check FROM pg_policies WHERE schemaname = %s ORDER BY 1, 2",
        (schema,),
    ).fetchall()
    security = conn.execute(
        """
        SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND c.relname <> 'schema_migrations' ORDER BY 1
        """,
        (schema,),
    ).fetchall()
    functions = conn.execute(
        """
        SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s ORDER BY 1
        """,
        (schema,),
    ).fetchall()
    return {
        "columns": [tuple(strip(v) if isinstance(v, str) else v for v in row) for row in columns],
        "constraints": [tuple(strip(v) for v in row) for row in constraints],
        "indexes": [tuple(strip(v) for v in row) for row in indexes],
        "policies": [tuple(strip(v) if isinstance(v, str) else v for v in row) for row in policies],
        "security": [tuple(row) for row in security],
        "functions": [tuple(strip(v) for v in row) for row in functions],
    }
