from datetime import UTC, datetime

import psycopg

from tests.dbutil import TEST_URL, drop_schema, make_schema
from tickwarden.migrate import pending, upgrade

NOW = datetime(2026, 1, 1, tzinfo=UTC)


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


def test_a_fresh_schema_records_its_migrations_in_one_statement():
    name = make_schema("mig")
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            executed: list[str] = []
            real = conn.execute

            def execute(query, params=None, **kwargs):  # type: ignore[no-untyped-def]
                executed.append(str(query))
                return real(query, params, **kwargs)

            conn.execute = execute  # type: ignore[method-assign]
            applied = upgrade(conn, NOW)
            recorded = [row[0] for row in real("SELECT version FROM schema_migrations ORDER BY version")]
            stamps = {row[0] for row in real("SELECT applied_at FROM schema_migrations")}
        # each migration's own text, and four statements around them (the lock, the table, the
        # look at what is applied) plus one insert for the lot, not one insert a migration
        assert len(executed) == len(applied) + 5
        assert sum(1 for text in executed if text.startswith("INSERT INTO schema_migrations")) == 1
        assert recorded == [m.version for m in applied] and stamps == {NOW}
    finally:
        drop_schema(name)
