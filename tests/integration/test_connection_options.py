"""What every connection of a `Database` is opened with."""

from datetime import UTC, datetime

import psycopg

from tests.dbutil import TEST_URL
from tickwarden.db import Database
from tickwarden.simulate.engine import Simulation


def test_connections_compile_no_statement_just_in_time(db):
    with db.connection() as conn:
        assert conn.execute("SHOW jit").fetchone() == ("off",)



def test_connections_keep_and_read_times_in_utc_whatever_the_servers_zone(schema):
    """A URL carrying another zone stands for a server whose default is not UTC: the session's is
    UTC all the same, and a timestamptz comes back in `datetime.UTC`, psycopg's quick path."""
    database = Database(f"{TEST_URL}?options=-c%20TimeZone%3DEurope/Berlin", schema=schema, min_size=1, max_size=1)
    try:
        with database.connection() as conn:
            assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
            at = conn.execute("SELECT '2026-06-01 12:00:00+02'::timestamptz").fetchone()[0]
            assert at.tzinfo is UTC and at == datetime(2026, 6, 1, 10, tzinfo=UTC)
            assert conn.execute("SELECT date_trunc('day', %s::timestamptz)::text",
                                (datetime(2026, 6, 1, 23, 30, tzinfo=UTC),)).fetchone() == (
                "2026-06-01 00:00:00+00",)
    finally:
        database.close()


def test_the_simulations_session_keeps_times_in_utc():
    with psycopg.connect(Simulation._session_url(f"{TEST_URL}?options=-c%20TimeZone%3DEurope/Berlin")) as conn:
        assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
