"""The pool lends the connection given back last first: a worker keeps meeting the same server processes."""

from __future__ import annotations

from tests.dbutil import TEST_URL
from tickwarden.db import Database


def test_the_connection_given_back_last_is_lent_next(db):
    database = Database(TEST_URL, schema=db.schema, min_size=3, max_size=3)
    try:
        database.pool.wait()  # all three idle: no connection the pool adds meanwhile
        with database.connection() as first, database.connection() as second, database.connection() as third:
            pids = [conn.info.backend_pid for conn in (first, second, third)]
        # given back in the order third, second, first (the `with` leaves them last to first)
        for _ in range(5):
            with database.connection() as conn:
                assert conn.info.backend_pid == pids[0]
        with database.connection() as conn, database.connection() as other:
            assert [conn.info.backend_pid, other.info.backend_pid] == [pids[0], pids[1]]
    finally:
        database.close()


def test_a_connection_the_server_dropped_is_still_replaced_when_lent(db):
    database = Database(TEST_URL, schema=db.schema, min_size=2, max_size=2)
    try:
        database.pool.wait()
        with database.connection() as conn:
            dropped = conn.info.backend_pid
        with Database(TEST_URL, schema=db.schema, min_size=1, max_size=1) as other:
            with other.connection() as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", (dropped,))
        with database.connection() as conn:  # the hottest was dropped: `check_lent` replaces it
            assert conn.info.backend_pid != dropped
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        database.close()
