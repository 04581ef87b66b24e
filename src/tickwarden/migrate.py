"""Schema migrations: numbered plain-SQL files, applied once each, in order.

`migrations/NNNN_name.sql` are applied inside one transaction each, under an
advisory lock so that replicas starting together migrate once. The lock is keyed by
the schema: deployments in other schemas of the same database never wait on it. The migrations
are the one definition of the schema: read a table's shape from them, or from `psql`'s describe on a migrated
database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources

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
                applied.append(migration)
            if applied:
                # One statement records them all, in the same transaction as the migrations:
                # committed together or not at all, as one insert after each would be.
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at)"
                    " SELECT version, name, %s FROM unnest(%s::integer[], %s::text[]) AS m (version, name)",
                    (now, [m.version for m in applied], [m.name for m in applied]),
                )
    except psycopg.Error as exc:
        raise MigrationError(f"The database schema could not be upgraded: {str(exc).splitlines()[0]}") from None
    return applied


def pending(conn: psycopg.Connection) -> list[Migration]:
    done = applied_versions(conn)
    return [m for m in available_migrations() if m.version not in done]
