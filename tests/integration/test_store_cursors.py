"""Cursors kept between statements: no cursor made per transaction, and no result answered by another's cursor."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
import pytest

from tests.dbutil import TEST_URL
from tickwarden.db import Database, DedicatedDatabase
from tickwarden.store import base

SQUARE = "SELECT %(n)s::int * %(n)s::int AS sq"
INVERSE = "SELECT 10 / %(d)s::int AS x"


@pytest.fixture(params=[False, True], ids=["pooled", "dedicated"])
def database(request, db):
    # A pool of one connection: cursors are kept per connection, and a pool of several may lend,
    # after the warm passes, a connection its initial growth opened late, whose first pass makes them.
    database = DedicatedDatabase(TEST_URL, schema=db.schema) if request.param else Database(
        TEST_URL, schema=db.schema, min_size=1, max_size=1)
    try:
        yield database
    finally:
        database.close()


def one_pass(database) -> None:
    with database.transaction() as store:
        first, second = store.outbox._submit_text(SQUARE, {"n": 3}), store.outbox._submit_text(INVERSE, {"d": 2})
        store.outbox._send("outbox_wake_notifier")
        assert second() == [{"x": 5}]
        assert first() == [{"sq": 9}]
        assert store.outbox._submit_text(SQUARE, {"n": 5})() == [{"sq": 25}]


def cursors_made(monkeypatch, work: Callable[[], None], times: int = 3) -> int:
    """How many cursors this thread makes running `work` `times` times."""
    created = []
    real_cursor = psycopg.Connection.cursor
    passes = threading.get_ident()

    def cursor(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        # Only this thread's passes count: the patch is the class's, and a thread another test left
        # running in this process (a loop, a pool's) makes cursors of its own. The pool's check of a
        # lent connection (an empty query, when its socket has something to read) is not the store's.
        if threading.get_ident() == passes and not any(
                frame.name == "check_connection" for frame in traceback.extract_stack()):
            created.append(1)
        return real_cursor(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "cursor", cursor)
    try:
        for _ in range(times):
            work()
    finally:
        monkeypatch.undo()
    return len(created)


def test_transactions_with_sent_and_submitted_statements_make_no_cursor_once_warm(database, monkeypatch):
    for _ in range(2):
        one_pass(database)
    # BEGIN, COMMIT, the sends and the submitted statements all run on kept cursors
    assert cursors_made(monkeypatch, lambda: one_pass(database)) == 0


def test_a_submitted_statement_that_failed_is_not_answered_by_its_cursor_again(database):
    with pytest.raises(psycopg.errors.DivisionByZero):
        with database.transaction() as store:
            store.outbox._submit_text(INVERSE, {"d": 0})()
    for d in (5, 2):  # the transaction after a failed one too: its BEGIN and COMMIT go on the cursors kept for them
        with database.transaction() as store:
            assert store.outbox._submit_text(INVERSE, {"d": d})() == [{"x": 10 // d}]


@pytest.mark.parametrize("way", ["fetch", "submit", "execute"])
def test_the_cursor_of_a_statement_that_failed_is_closed_not_kept(database, monkeypatch, way):
    taken = []
    real_take = base._take
    monkeypatch.setattr(base, "_take", lambda conn, key: taken.append(real_take(conn, key)) or taken[-1])
    monkeypatch.setitem(base.queries(), "test_inverse", INVERSE)
    with pytest.raises(psycopg.errors.DivisionByZero):
        with database.transaction() as store:
            taken.clear()
            if way == "fetch":
                store.outbox._fetch(INVERSE, {"d": 0})
            elif way == "submit":
                store.outbox._submit_text(INVERSE, {"d": 0})()
            else:
                store.outbox._execute("test_inverse", {"d": 0})
    [cur] = [cur for cur in taken if cur.closed]
    assert cur not in database_kept(database)
    with database.transaction() as store:
        assert store.outbox._fetch(INVERSE, {"d": 5}) == [{"x": 2}]


def database_kept(database) -> list:
    with database.transaction() as store:
        return list(store.conn.__dict__.get(base._KEPT, {}).values())


def test_a_statement_submitted_again_before_its_rows_are_read_is_answered_on_a_cursor_of_its_own(database):
    for _ in range(3):
        with database.transaction() as store:
            reads = [store.outbox._submit_text(SQUARE, {"n": n}) for n in (2, 3, 4)]
            assert [read() for read in reversed(reads)] == [[{"sq": 16}], [{"sq": 9}], [{"sq": 4}]]


def test_statements_submitted_again_before_their_rows_are_read_make_no_cursor_once_warm(database, monkeypatch):
    def overlapping() -> None:
        with database.transaction() as store:
            reads = [store.outbox._submit_text(SQUARE, {"n": n}) for n in (2, 3, 4)]
            assert [read() for read in reads] == [[{"sq": 4}], [{"sq": 9}], [{"sq": 16}]]

    def registered() -> int:
        with database.transaction() as store:
            return len(store.conn.__dict__.get(base._CONVERTED, {}))

    for _ in range(2):
        overlapping()
    before = registered()
    # the two cursors given back while the first was kept are its spares, taken again before any new one
    assert cursors_made(monkeypatch, overlapping) == 0
    # and no cursor pushed out of its place stays in the registry of `_run` (the pipelined connection's)
    assert registered() == before


def test_cursors_run_once_do_not_push_a_kept_cursors_statement_out_of_the_registry(db, monkeypatch):
    database = DedicatedDatabase(TEST_URL, schema=db.schema)
    try:
        for d in (5, 2):  # prepared at its first use, registered at its first run on its kept cursor
            with database.transaction() as store:
                assert store.outbox._fetch(INVERSE, {"d": d}) == [{"x": 10 // d}]
        with database.transaction() as store:
            for n in range(base.CONVERTED_MAX + 10):  # sent, never read: each on a cursor of its own, never kept
                store.outbox._submit_text(SQUARE, {"n": n})
        executed: list[str] = []
        real_execute = psycopg.Cursor.execute

        def execute(cur, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
            executed.append(str(query))
            return real_execute(cur, query, params, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        with database.transaction() as store:
            assert store.outbox._fetch(INVERSE, {"d": 1}) == [{"x": 10}]
            assert len(store.conn.__dict__[base._CONVERTED]) < base.CONVERTED_MAX
        monkeypatch.undo()
        # the kept cursor's entry outlived the one-off cursors': its statement is still sent prepared
        assert INVERSE not in executed
    finally:
        database.close()


def test_a_kept_cursor_decodes_its_statements_column_names_once(database):
    with database.transaction() as store:
        assert store.outbox._fetch(SQUARE, {"n": 2}) == [{"sq": 4}]
        factory = store.conn.__dict__["_tickwarden_kept_cursors"][(SQUARE, "dict", 0)].row_factory
        made = factory.make
        assert made is not None  # the row maker of the first result, with its names
    with database.transaction() as store:
        assert store.outbox._fetch(SQUARE, {"n": 4}) == [{"sq": 16}]
    assert factory.make is made


def test_a_statement_whose_large_result_closed_its_cursor_keeps_its_column_names_for_the_next(database):
    many = "SELECT generate_series(1, %(n)s::int) AS i"
    with database.transaction() as store:
        assert len(store.outbox._fetch(many, {"n": 100})) == 100  # more than a kept cursor holds: closed
        factory = store.conn.__dict__["_tickwarden_dict_rows"][many]
        made = factory.make
        assert store.outbox._fetch(many, {"n": 2}) == [{"i": 1}, {"i": 2}]
        assert store.conn.__dict__["_tickwarden_kept_cursors"][(many, "dict", 0)].row_factory is factory
    assert factory.make is made


def test_the_tickers_claim_makes_no_cursor_once_warm(database, monkeypatch):
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)

    def claim() -> None:
        with database.transaction() as store:
            assert store.trigger.claim_due_and_earliest(now, 10) == ([], None)  # an empty catalog: one row, no group

    for _ in range(2):
        claim()
    assert cursors_made(monkeypatch, claim) == 0


def test_a_statement_submitted_for_tuples_reads_them_on_a_kept_cursor_of_its_own_shape(database, monkeypatch):
    def one_tuple_pass() -> None:
        with database.transaction() as store:
            tuples, dicts = store.outbox._submit_text(SQUARE, {"n": 3}, tuples=True), store.outbox._submit_text(
                SQUARE, {"n": 4})
            assert dicts() == [{"sq": 16}]
            assert tuples() == [(9,)]

    one_tuple_pass()  # the warm pass makes the cursors of each shape
    assert cursors_made(monkeypatch, one_tuple_pass) == 0
