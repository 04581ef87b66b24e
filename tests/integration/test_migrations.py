from datetime import UTC, datetime

import psycopg

from tests.dbutil import TEST_URL, drop_schema, make_schema
from tickwarden.migrate import declared_schema, describe_schema, pending, upgrade

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_migrations_produce_exactly_the_declared_schema():
    migrated, declared = make_schema("mig"), make_schema("decl")
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={migrated}") as conn:
            upgrade(conn, NOW)
            conn.commit()
            from_migrations = describe_schema(conn, migrated)
        with psycopg.connect(TEST_URL, options=f"-c search_path={declared}") as conn:
            conn.execute(declared_schema())
            conn.commit()
            from_declaration = describe_schema(conn, declared)
        assert from_migrations["columns"], "the description must not be empty"
        for part in from_migrations:
            assert from_migrations[part] == from_declaration[part], part
    finally:
        drop_schema(migrated)
        drop_schema(declared)


def test_upgrade_is_idempotent_and_records_versions():
    name = make_schema("mig")
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            first = upgrade(conn, NOW)
            second = upgrade(conn, NOW)
            assert first and not second
            assert pending(conn) == []
    finally:
        drop_schema(name)
