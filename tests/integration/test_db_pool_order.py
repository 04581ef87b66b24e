"""The pool lends the connection given back last first: a worker keeps meeting the same server processes."""

from __future__ import annotations

import time

import psycopg

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
        with psycopg.connect(TEST_URL, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (dropped,))
            # pg_terminate_backend only signals: the session is dropped once its backend has sent
            # its FATAL error and left, which a loaded machine may take a while to do. (Each
            # statement in autocommit: a transaction would keep reading one snapshot of the activity.)
            deadline = time.monotonic() + 30
            while killer.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (dropped,)).fetchone():
                assert time.monotonic() < deadline, "the terminated backend did not exit"
                time.sleep(0.01)
        with database.connection() as conn:  # the hottest was dropped: `check_lent` replaces it
            assert conn.info.backend_pid != dropped
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        database.close()
