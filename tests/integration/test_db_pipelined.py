"""`Database.transaction(pipelined=True)`: one transaction in pipeline mode, as whole as any other."""

from __future__ import annotations

import contextlib
import time

import psycopg
import pytest
from psycopg.pq import PipelineStatus, TransactionStatus

import tickwarden.db
from tests.dbutil import TEST_URL
from tickwarden.db import Database


@pytest.fixture
def one(schema):
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}", autocommit=True) as conn:
        conn.execute("CREATE TABLE pipelined_probe (n int PRIMARY KEY)")
    with Database(TEST_URL, schema=schema, min_size=1, max_size=1) as db:  # every borrow lends the same connection
        yield db


def rows(db: Database) -> list[int]:
    with db.connection() as conn:
        return [n for (n,) in conn.execute("SELECT n FROM pipelined_probe ORDER BY n")]


def lent_as_usual(db: Database) -> None:
    with db.connection() as conn:
        assert not conn.autocommit
        assert conn.pgconn.pipeline_status == PipelineStatus.OFF
        assert conn.info.transaction_status == TransactionStatus.IDLE


def test_it_commits_its_writes_together_and_lends_the_connection_back_as_it_found_it(one):
    with one.transaction(pipelined=True) as store:
        store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")  # not read: goes with the next read
        assert store.conn.execute("SELECT count(*) FROM pipelined_probe").fetchone() == (1,)  # its own write
        store.conn.execute("INSERT INTO pipelined_probe VALUES (2)")  # goes with the COMMIT
    assert rows(one) == [1, 2]
    lent_as_usual(one)


def test_a_failing_statement_rolls_the_whole_transaction_back(one):
    with pytest.raises(psycopg.errors.UniqueViolation), one.transaction(pipelined=True) as store:
        store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
        store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
        store.conn.execute("SELECT 1").fetchone()  # the error surfaces at the next read
    assert rows(one) == []
    lent_as_usual(one)


def test_a_failing_statement_nobody_reads_fails_the_commit(one):
    with pytest.raises(psycopg.errors.UniqueViolation), one.transaction(pipelined=True) as store:
        store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
        store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
    assert rows(one) == []
    lent_as_usual(one)


def test_a_failure_that_arrives_while_the_commit_is_sent_is_raised_as_itself(one):
    """The ticker fires a pass again over a unique violation that surfaces at the commit: it must see that error.

    The failing insert goes out at once and the block then waits, as a busy machine does
    between sends: its error is read while the COMMIT and the sync are sent, and the
    COMMIT's skipped result only after, where psycopg raised `PipelineAborted` instead.
    """
    with one.transaction() as store:
        store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
    for _ in range(5):
        with pytest.raises(psycopg.errors.UniqueViolation), one.transaction(pipelined=True) as store:
            store.conn.execute("INSERT INTO pipelined_probe VALUES (2)")
            store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
            store.conn.pgconn.flush()
            time.sleep(0.05)
        assert rows(one) == [1]
        lent_as_usual(one)


def test_an_exception_in_the_block_rolls_it_back(one):
    with pytest.raises(ZeroDivisionError), one.transaction(pipelined=True) as store:
        store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
        assert store.conn.execute("SELECT count(*) FROM pipelined_probe").fetchone() == (1,)
        raise ZeroDivisionError
    assert rows(one) == []
    lent_as_usual(one)


def test_a_transaction_block_inside_is_a_savepoint(one):
    with one.transaction(pipelined=True) as store:
        store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
        # read: nothing is in flight now, and libpq still reports the status of the last sync (idle)
        assert store.conn.execute("SELECT count(*) FROM pipelined_probe").fetchone() == (1,)
        with pytest.raises(ZeroDivisionError), store.conn.transaction():
            store.conn.execute("INSERT INTO pipelined_probe VALUES (2)")
            raise ZeroDivisionError
        store.conn.execute("INSERT INTO pipelined_probe VALUES (3)")
    assert rows(one) == [1, 3]  # the block rolled back to its savepoint; the rest committed once, at the end
    lent_as_usual(one)


def test_nested_savepoints_roll_back_only_their_own_block(one):
    with one.transaction(pipelined=True) as store:
        with store.conn.transaction():
            store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
            with pytest.raises(ZeroDivisionError), store.conn.transaction():
                store.conn.execute("INSERT INTO pipelined_probe VALUES (2)")
                raise ZeroDivisionError
            store.conn.execute("INSERT INTO pipelined_probe VALUES (3)")
        with pytest.raises(ZeroDivisionError), store.conn.transaction():
            store.conn.execute("INSERT INTO pipelined_probe VALUES (4)")
            raise ZeroDivisionError
        with store.conn.transaction():
            store.conn.execute("INSERT INTO pipelined_probe VALUES (5)")
    assert rows(one) == [1, 3, 5]
    lent_as_usual(one)


def test_savepoints_one_after_another_send_the_same_statements_without_a_cursor(one, monkeypatch):
    """A savepoint is named by its depth: a pass's savepoint is the same statement every time, sent with no cursor."""
    sent: list[tuple[int, str]] = []  # (the statement object, its text) of each transaction command
    executed: list[str] = []  # what cursors ran
    real_command, real_execute = tickwarden.db._command, psycopg.Cursor.execute

    def commanding(conn, statement):
        sent.append((id(statement), statement.as_string(conn)))
        real_command(conn, statement)

    def executing(cur, query, *args, **kwargs):
        executed.append(query if isinstance(query, str) else query.as_string(cur.connection))
        return real_execute(cur, query, *args, **kwargs)

    monkeypatch.setattr(tickwarden.db, "_command", commanding)
    monkeypatch.setattr(psycopg.Cursor, "execute", executing)
    for n in (1, 2):
        with one.transaction(pipelined=True) as store, store.conn.transaction():
            store.conn.execute("INSERT INTO pipelined_probe VALUES (%s)", (n,))
    savepoints = [s for s in sent if "SAVEPOINT" in s[1]]
    assert [text for _, text in savepoints] == ['SAVEPOINT "tickwarden_savepoint_1"',
                                               'RELEASE SAVEPOINT "tickwarden_savepoint_1"'] * 2
    assert savepoints[:2] == savepoints[2:]  # the same objects too: composed once
    assert [text for _, text in sent if "SAVEPOINT" not in text] == ["BEGIN", "COMMIT"] * 2
    assert executed == ["INSERT INTO pipelined_probe VALUES (%s)"] * 2  # no cursor sent a transaction command
    assert rows(one) == [1, 2]


def test_transaction_commands_are_encoded_once_per_connection(one, monkeypatch):
    """BEGIN, COMMIT and a savepoint's statements are queued as bytes encoded at their first use, not every time."""
    encoded: list[str] = []  # each whole statement encoded (a composed one's parts are encoded inside it)
    depth = [0]

    def counting(real):
        def as_bytes(self, context=None):
            depth[0] += 1
            try:
                data = real(self, context)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                encoded.append(data.decode())
            return data
        return as_bytes

    monkeypatch.setattr(psycopg.sql.SQL, "as_bytes", counting(psycopg.sql.SQL.as_bytes))
    monkeypatch.setattr(psycopg.sql.Composed, "as_bytes", counting(psycopg.sql.Composed.as_bytes))
    for n in (1, 2, 3):
        with one.transaction(pipelined=True) as store, store.conn.transaction():
            store.conn.execute("INSERT INTO pipelined_probe VALUES (%s)", (n,))
    assert sorted(encoded) == sorted(['BEGIN', 'SAVEPOINT "tickwarden_savepoint_1"',
                                      'RELEASE SAVEPOINT "tickwarden_savepoint_1"', 'COMMIT'])
    assert rows(one) == [1, 2, 3]
    lent_as_usual(one)


def test_a_queued_command_raises_its_own_error_and_a_skipped_one_pipeline_aborted():
    with psycopg.connect(TEST_URL, autocommit=True) as conn, conn.pipeline() as queued:
        tickwarden.db._command(conn, psycopg.sql.SQL("RELEASE SAVEPOINT nowhere"))  # outside any transaction block
        with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
            queued.sync()
        failing = conn.execute("SELECT 1 / 0")
        with pytest.raises(psycopg.errors.DivisionByZero):
            failing.fetchall()
        tickwarden.db._command(conn, tickwarden.db.BEGIN)  # the server skips it until the sync
        with pytest.raises(psycopg.errors.PipelineAborted):
            queued.sync()
        assert conn.execute("SELECT 2").fetchone() == (2,)  # the sync ended the aborted state


@pytest.fixture
def dedicated(schema):
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}", autocommit=True) as conn:
        conn.execute("CREATE TABLE pipelined_probe (n int PRIMARY KEY)")
    database = tickwarden.db.DedicatedDatabase(TEST_URL, schema=schema)
    try:
        yield database
    finally:
        database.close()


def test_a_dedicated_transaction_is_one_context_manager_and_lends_the_connection_back(dedicated, monkeypatch):
    """`transaction` and `autocommit` are the pipelined borrow itself: one context manager per transaction, and
    not a generator's (whose four calls and two resumptions a borrow cost the simulator more than the borrow)."""
    with dedicated.transaction():  # the first enters the kept pipeline too
        pass
    entered: list[str] = []
    real_enter = contextlib._GeneratorContextManager.__enter__

    def entering(self):
        entered.append(self.gen.__name__)
        return real_enter(self)

    monkeypatch.setattr(contextlib._GeneratorContextManager, "__enter__", entering)
    with dedicated.transaction() as store:
        store.conn.execute("INSERT INTO pipelined_probe VALUES (1)")
    with dedicated.autocommit() as store:
        store.conn.execute("INSERT INTO pipelined_probe VALUES (2)")
    assert entered == [] and type(dedicated.transaction()) is type(dedicated.autocommit()) is tickwarden.db._Pipelined
    with pytest.raises(ZeroDivisionError), dedicated.transaction() as store:
        store.conn.execute("INSERT INTO pipelined_probe VALUES (3)")
        with pytest.raises(RuntimeError, match="already lent"), dedicated.autocommit():
            pass
        raise ZeroDivisionError
    monkeypatch.undo()
    with dedicated.probe() as store:  # lent back after the error, the failed transaction rolled back
        assert store.conn.execute("SELECT n FROM pipelined_probe ORDER BY n").fetchall() == [(1,), (2,)]


def test_writes_sent_ahead_lend_the_connection_once_and_back_after_an_error(dedicated):
    """`ahead` is a borrow like the others: a nested one is refused, and the connection comes back whatever
    the writer raised; what it sent commits with the next borrow."""
    with dedicated.transaction():  # enters the kept pipeline
        pass
    with pytest.raises(ZeroDivisionError), dedicated.ahead() as conn:
        conn.execute("INSERT INTO pipelined_probe VALUES (7)")
        with pytest.raises(RuntimeError, match="already lent"), dedicated.probe():
            pass
        raise ZeroDivisionError
    with dedicated.transaction() as store:  # lent back; the write sent ahead is this transaction's
        assert store.conn.execute("SELECT n FROM pipelined_probe").fetchall() == [(7,)]


def test_a_dedicated_connection_prepares_a_statement_at_its_first_execution(dedicated):
    """The server keeps the statement's plan from its first run on: none of its runs is parsed and planned anew."""
    with dedicated.transaction() as store:
        assert store.conn.execute("SELECT count(*) FROM pipelined_probe WHERE n = %s", (1,)).fetchone() == (0,)
        prepared = store.conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ("%FROM pipelined_probe WHERE n = $1%",)).fetchone()
    assert prepared == (1,)


def test_outside_the_pipeline_a_dedicated_connection_prepares_as_psycopg_does(dedicated):
    """A statement run once outside the kept pipeline (a VACUUM) is not prepared: that would cost a round trip of its own."""
    with dedicated.transaction() as store:  # the kept pipeline, entered first, prepares at first use
        assert store.conn.prepare_threshold == 0
    with dedicated.maintenance() as store:
        assert store.conn.prepare_threshold == 5  # psycopg's default
        store.conn.execute("SELECT count(*) FROM pipelined_probe WHERE n > %s", (1,))
        prepared = store.conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ("%FROM pipelined_probe WHERE n > $1%",)).fetchone()
    assert prepared == (0,)
    with dedicated.transaction() as store:
        assert store.conn.prepare_threshold == 0
