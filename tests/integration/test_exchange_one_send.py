"""The exchange's statements and its sync leave in one write; its errors, rollbacks and broken connections
are as before (`tickwarden.pipeline._one_send`)."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from datetime import timedelta

import psycopg
import pytest
from psycopg.pq import PipelineStatus

from tests.dbutil import TEST_URL
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tickwarden.db import Database
from tickwarden.errors import DatabaseUnavailable
from tickwarden.worker import Worker

DATA_SEGS_OUT = 156  # offset of `tcpi_data_segs_out` (u32) in Linux's struct tcp_info (Linux 4.6 and later)


def data_segments_out(conn: psycopg.Connection) -> int:
    """TCP segments with data the connection's socket has sent: one per write of the client on loopback,
    where TCP_NODELAY (libpq's) sends each write at once and nothing is left waiting to coalesce with it."""
    sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    finally:
        sock.close()
    assert len(info) >= DATA_SEGS_OUT + 4, "this kernel's tcp_info has no data_segs_out"
    segments: int = struct.unpack_from("I", info, DATA_SEGS_OUT)[0]
    return segments


INSERT = "INSERT INTO sends_probe (n) VALUES (%(n)s) RETURNING n"


@pytest.fixture
def one(db):
    """A database of one connection (TCP: the test server's URL names a host) with a table to write."""
    with db.connection() as conn:
        conn.execute("CREATE TABLE sends_probe (n int PRIMARY KEY CHECK (n < 1000))")
    with Database(TEST_URL, schema=db.schema, min_size=1, max_size=1) as single:
        single.pool.wait()
        yield single


def warm(single: Database, start: int) -> None:
    """Six exchanges of three inserts each, so that psycopg has prepared the statement for each of the three
    places (at its fifth use) and the store sends it itself (`store.base._run`): the warm attempt's path."""
    for i in range(6):
        with single.autocommit() as store:
            n = start + 3 * i
            assert store.execution._exchange([(INSERT, {"n": n}), (INSERT, {"n": n + 1}), (INSERT, {"n": n + 2})]) == [
                [{"n": n}], [{"n": n + 1}], [{"n": n + 2}]]


def probe_rows(db) -> list[int]:
    with db.connection() as conn:
        return [n for (n,) in conn.execute("SELECT n FROM sends_probe ORDER BY n").fetchall()]


def test_a_warm_attempts_exchange_leaves_in_one_write(db, clock):
    """The statements, then the sync, then a flush request were three writes (and two waits on the socket)
    of psycopg's pipeline exit at every attempt."""
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0) for i in range(10)]
    conns: list[psycopg.Connection] = []
    with Database(TEST_URL, schema=db.schema, min_size=1, max_size=1, configure=conns.append) as single:
        single.pool.wait()
        worker = Worker(single, "w1", clock=clock, secret_key=SECRET)
        try:
            for _ in range(6):  # wake the environment and prepare the statements
                worker.run_once(clock.now())
            [conn] = conns
            before = data_segments_out(conn)
            for _ in range(3):
                assert worker.run_once(clock.now()) <= clock.now()
            writes = data_segments_out(conn) - before
            assert conn.pgconn.pipeline_status == PipelineStatus.OFF
        finally:
            worker.close(clock.now())
    assert writes == 3, writes  # one a warm attempt: its one round trip in one write
    with db.transaction() as store:
        assert [[a.status for a in store.ledger.list_attempts(r.id)] for r in runs[:9]] == [["succeeded"]] * 9


def test_an_exchange_of_warm_statements_is_one_write_and_reads_every_result(db, one):
    warm(one, 0)
    with one.autocommit() as store:
        before = data_segments_out(store.conn)
        results = store.execution._exchange([(INSERT, {"n": 100}), (INSERT, {"n": 101}), (INSERT, {"n": 102})])
        assert data_segments_out(store.conn) - before == 1
        assert store.conn.pgconn.pipeline_status == PipelineStatus.OFF and store.conn._pipeline is None
    assert results == [[{"n": 100}], [{"n": 101}], [{"n": 102}]]
    assert probe_rows(db) == [*range(18), 100, 101, 102]


@pytest.mark.parametrize(("value", "error"), [(100, psycopg.errors.UniqueViolation),
                                              (5000, psycopg.errors.CheckViolation)])
def test_a_failed_statement_raises_its_own_error_and_the_sync_rolls_back_the_others(db, one, value, error):
    warm(one, 0)
    with one.autocommit() as store:
        before = data_segments_out(store.conn)
        with pytest.raises(error):
            store.execution._exchange([(INSERT, {"n": 100}), (INSERT, {"n": value}), (INSERT, {"n": 102})])
        assert data_segments_out(store.conn) - before == 1  # the new exit's, not psycopg's
        conn = store.conn
        assert conn.pgconn.pipeline_status == PipelineStatus.OFF and conn._pipeline is None
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert probe_rows(db) == list(range(18))  # the first insert rolled back with the failure, the third skipped
    with one.autocommit() as store:  # the same connection, sound: its kept cursors read their own results
        assert store.conn is conn
        assert store.execution._exchange([(INSERT, {"n": 100}), (INSERT, {"n": 101}), (INSERT, {"n": 102})]) == [
            [{"n": 100}], [{"n": 101}], [{"n": 102}]]
    assert probe_rows(db) == [*range(18), 100, 101, 102]


def test_a_backend_killed_before_the_exchange_raises_and_the_next_borrow_reconnects(db, one):
    warm(one, 0)
    with pytest.raises(DatabaseUnavailable) as raised, one.autocommit() as store:
        conn, pid = store.conn, store.conn.info.backend_pid
        with psycopg.connect(TEST_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            deadline = time.monotonic() + 10
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]:
                assert time.monotonic() < deadline, "the terminated backend did not exit"
                time.sleep(0.01)
        store.execution._exchange([(INSERT, {"n": 100}), (INSERT, {"n": 101}), (INSERT, {"n": 102})])
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)
    assert conn.closed and conn._pipeline is None
    with one.autocommit() as store:
        assert store.conn.info.backend_pid != pid
        assert store.execution._exchange([(INSERT, {"n": 100})]) == [[{"n": 100}]]
    assert probe_rows(db) == [*range(18), 100]


def test_a_backend_killed_during_the_exchange_raises_and_its_writes_are_rolled_back(db, one):
    warm(one, 0)
    killed: list[int] = []

    def kill(pid: int) -> None:
        with psycopg.connect(TEST_URL, autocommit=True) as admin:
            deadline = time.monotonic() + 10
            while not admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND state = 'active' "
                                    "AND query LIKE '%%pg_sleep%%'", (pid,)).fetchone()[0]:
                assert time.monotonic() < deadline, "the exchange never reached its sleep"
                time.sleep(0.01)
            killed.append(admin.execute("SELECT count(pg_terminate_backend(%s))", (pid,)).fetchone()[0])

    with pytest.raises(DatabaseUnavailable) as raised, one.autocommit() as store:
        conn, pid = store.conn, store.conn.info.backend_pid
        killer = threading.Thread(target=kill, args=(pid,))
        killer.start()
        try:
            store.execution._exchange([(INSERT, {"n": 100}), ("SELECT pg_sleep(10)", {}), (INSERT, {"n": 102})])
        finally:
            killer.join()
    assert killed == [1]
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)
    assert conn.closed and conn._pipeline is None
    assert probe_rows(db) == list(range(18))  # the insert before the sleep went with the backend
    with one.autocommit() as store:
        assert store.execution._exchange([(INSERT, {"n": 100})]) == [[{"n": 100}]]


def test_the_one_send_exit_is_taken_only_under_the_psycopg_it_is_tested_with(db, one, monkeypatch):
    from tickwarden import pipeline
    from tickwarden.pipeline import PSYCOPG_TESTED, _one_send_internals

    assert psycopg.__version__.startswith(PSYCOPG_TESTED) and _one_send_internals(psycopg.__version__)
    assert not _one_send_internals("3.4.0") and not _one_send_internals("3.2.9") and not _one_send_internals("4.0.0")
    warm(one, 0)
    monkeypatch.setattr(pipeline, "_ONE_SEND", False)  # psycopg's own exit: the statements, the sync, a flush request
    with one.autocommit() as store:
        before = data_segments_out(store.conn)
        assert store.execution._exchange([(INSERT, {"n": 100}), (INSERT, {"n": 101})]) == [[{"n": 100}], [{"n": 101}]]
        assert data_segments_out(store.conn) - before > 1
        with pytest.raises(psycopg.errors.UniqueViolation):
            store.execution._exchange([(INSERT, {"n": 102}), (INSERT, {"n": 100})])
        assert store.conn.pgconn.pipeline_status == PipelineStatus.OFF and store.conn._pipeline is None
    assert probe_rows(db) == [*range(18), 100, 101]
