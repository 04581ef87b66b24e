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
