"""The store's statements in pipeline mode: no cursor, prepared once per connection, psycopg's errors."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pytest

from tests.dbutil import TEST_URL
from tickwarden.db import Database, DedicatedDatabase
from tickwarden.store import prepared

PICK = "SELECT n, n * 2 AS twice FROM prepared_probe WHERE n >= %(n)s ORDER BY n"
ADD = "INSERT INTO prepared_probe VALUES (%(n)s)"
SQUARE = "SELECT %(n)s::bigint * %(n)s::bigint AS sq"


@dataclass
class Probe:
    n: int
    twice: int


@pytest.fixture
def dedicated(schema):
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}", autocommit=True) as conn:
        conn.execute("CREATE TABLE prepared_probe (n int PRIMARY KEY)")
    database = DedicatedDatabase(TEST_URL, schema=schema)
    try:
        yield database
    finally:
        database.close()


def prepared_here(store) -> list[str]:
    """The statements prepared on the store's connection, as the server lists them."""
    return [row["statement"] for row in store.outbox._fetch(
        "SELECT statement FROM pg_prepared_statements ORDER BY prepare_time, statement", None)]


def test_the_stores_statements_go_without_a_cursor_each_prepared_once(dedicated, monkeypatch):
    made = []
    real_cursor = psycopg.Connection.cursor

    def cursor(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(1)
        return real_cursor(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "cursor", cursor)
    for n in (1, 2, 3):
        with dedicated.transaction() as store:
            store.outbox._send_text(ADD, {"n": n})
            read = store.outbox._submit_text(PICK, {"n": 2})
            assert store.outbox._fetch(SQUARE, {"n": n}) == [{"sq": n * n}]
            assert read() == [{"n": k, "twice": 2 * k} for k in range(2, n + 1)]
    monkeypatch.undo()
    assert made == []
    with dedicated.transaction() as store:
        statements = prepared_here(store)
    assert statements.count("INSERT INTO prepared_probe VALUES ($1)") == 1
    assert statements.count("SELECT n, n * 2 AS twice FROM prepared_probe WHERE n >= $1 ORDER BY n") == 1


def test_records_and_row_counts_read_as_through_a_cursor(dedicated):
    with dedicated.transaction() as store:
        for n in (1, 2, 3):
            store.outbox._send_text(ADD, {"n": n})
        assert store.outbox._records("probe", {"n": 2}, Probe, text=PICK) == [Probe(2, 4), Probe(3, 6)]
        assert store.outbox._fetch("DELETE FROM prepared_probe WHERE n < %(n)s", {"n": 3}) == []
    with dedicated.transaction() as store:
        assert store.outbox._records("probe", {"n": 0}, Probe, text=PICK) == [Probe(3, 6)]


def test_a_statement_whose_columns_differ_from_its_dataclass_fails_at_its_first_run(dedicated):
    with pytest.raises(AssertionError, match="probe_squared returns"), dedicated.transaction() as store:
        store.outbox._records("probe_squared", {"n": 2}, Probe, text=SQUARE)


def test_parameters_of_other_types_get_a_prepared_statement_of_their_own(dedicated):
    # psycopg sends 3 as int2 and 2**40 as int8, and None with no type: one prepared statement
    # a set of types, or the server would take 2**40 for an int2.
    following = "SELECT %(n)s::bigint + 1 AS following"
    with dedicated.transaction() as store:
        for n in (3, 2**40, None, 4, 2**41):
            assert store.outbox._fetch(following, {"n": n}) == [{"following": None if n is None else n + 1}]
        statements = prepared_here(store)
    assert statements.count("SELECT $1::bigint + 1 AS following") == 3


def test_a_failing_statement_raises_its_own_error_and_rolls_its_transaction_back(dedicated):
    with dedicated.transaction() as store:
        store.outbox._send_text(ADD, {"n": 1})
    with pytest.raises(psycopg.errors.UniqueViolation), dedicated.transaction() as store:
        store.outbox._send_text(ADD, {"n": 2})
        store.outbox._send_text(ADD, {"n": 1})  # nobody reads it: the next read raises its error
        store.outbox._fetch(PICK, {"n": 0})
    with dedicated.transaction() as store:
        assert store.outbox._fetch(PICK, {"n": 0}) == [{"n": 1, "twice": 2}]  # prepared all the same
        store.outbox._send_text(ADD, {"n": 2})
        assert store.outbox._fetch(PICK, {"n": 2}) == [{"n": 2, "twice": 4}]


def test_a_statement_whose_prepare_an_error_skipped_is_prepared_again(dedicated):
    """The server skips everything after an error until the pipeline syncs, a prepare too: it must be sent again."""
    with dedicated.transaction() as store:
        store.outbox._send_text(ADD, {"n": 1})
    with pytest.raises(psycopg.errors.UniqueViolation), dedicated.transaction() as store:
        store.outbox._send_text(ADD, {"n": 1})
        store.outbox._fetch(SQUARE, {"n": 5})  # its first use: prepared after the failure, so skipped
    with dedicated.transaction() as store:
        assert store.outbox._fetch(SQUARE, {"n": 5}) == [{"sq": 25}]
        assert prepared_here(store).count("SELECT $1::bigint * $1::bigint AS sq") == 1


def test_a_statement_that_fails_to_prepare_raises_its_error_and_is_prepared_again_when_fixed(dedicated):
    bad = "SELECT n FROM prepared_probe_later WHERE n = %(n)s"
    with pytest.raises(psycopg.errors.UndefinedTable), dedicated.transaction() as store:
        store.outbox._fetch(bad, {"n": 1})
    with dedicated.connection() as conn:
        conn.execute("CREATE TABLE prepared_probe_later (n int)")
        conn.execute("INSERT INTO prepared_probe_later VALUES (1)")
        conn.commit()
    with dedicated.transaction() as store:
        assert store.outbox._fetch(bad, {"n": 1}) == [{"n": 1}]


def test_a_missing_parameter_is_named(dedicated):
    with pytest.raises(psycopg.ProgrammingError, match="query parameter missing: n"), \
            dedicated.transaction() as store:
        store.outbox._fetch(PICK, {"m": 1})


def test_past_the_bound_of_statement_texts_a_connection_runs_them_on_cursors(dedicated, monkeypatch):
    monkeypatch.setattr(prepared, "MAX_STATEMENTS", 1)
    with dedicated.transaction() as store:
        assert store.outbox._fetch(SQUARE, {"n": 2}) == [{"sq": 4}]
        assert store.outbox._fetch(PICK, {"n": 0}) == []  # the second text: a kept cursor
        assert list(store.conn.__dict__["_tickwarden_prepared"]) == [SQUARE]
        assert (PICK, "dict", 0) in store.conn.__dict__["_tickwarden_kept_cursors"]


def test_column_names_are_decoded_once_per_statement(dedicated):
    with dedicated.transaction() as store:
        assert store.outbox._fetch(SQUARE, {"n": 2}) == [{"sq": 4}]
        made = store.conn.__dict__["_tickwarden_prepared"][SQUARE].columns
        assert made is not None
    with dedicated.transaction() as store:
        assert store.outbox._fetch(SQUARE, {"n": 4}) == [{"sq": 16}]
        assert store.conn.__dict__["_tickwarden_prepared"][SQUARE].columns is made


def test_outside_pipeline_mode_the_store_runs_on_cursors(schema):
    with Database(TEST_URL, schema=schema, min_size=1, max_size=1) as database:
        with database.transaction() as store:
            assert store.outbox._fetch(SQUARE, {"n": 3}) == [{"sq": 9}]
            assert "_tickwarden_prepared" not in store.conn.__dict__
        with database.transaction(pipelined=True) as store:  # the ticker's: in pipeline mode
            assert store.outbox._fetch(SQUARE, {"n": 3}) == [{"sq": 9}]
            assert SQUARE in store.conn.__dict__["_tickwarden_prepared"]


def test_a_psycopg_without_the_members_the_path_uses_runs_the_store_on_cursors(dedicated, monkeypatch):
    assert prepared.SUPPORTED  # this psycopg has them: the path is taken (see the first test)
    monkeypatch.setattr(prepared, "SUPPORTED", False)
    with dedicated.transaction() as store:
        store.outbox._send_text(ADD, {"n": 5})
        assert store.outbox._fetch(PICK, {"n": 5}) == [{"n": 5, "twice": 10}]
        assert "_tickwarden_prepared" not in store.conn.__dict__
        assert (PICK, "dict", 0) in store.conn.__dict__["_tickwarden_kept_cursors"]


@pytest.mark.parametrize("pipelined_drop", [False, True])
def test_statements_survive_psycopg_deallocating_every_prepared_statement_of_the_session(schema, pipelined_drop):
    """psycopg sends DEALLOCATE ALL after a DROP, ALTER or ROLLBACK run on a cursor while it holds
    prepared statements of its own (they may name what changed): the store's are prepared again."""
    with Database(TEST_URL, schema=schema, min_size=1, max_size=1) as database:
        with database.connection() as conn:
            conn.execute("CREATE TABLE prepared_probe (n int PRIMARY KEY)")
            conn.commit()
        for round_ in range(3):
            with database.transaction(pipelined=True) as store:
                assert store.outbox._fetch(SQUARE, {"n": round_}) == [{"sq": round_ * round_}]
                conn = store.conn
                for _ in range(6):  # past psycopg's prepare threshold: a prepared statement of its own
                    conn.execute("SELECT count(*) FROM prepared_probe").fetchall()
                conn.execute(f"CREATE TABLE scratch_{round_} (n int)")
                if pipelined_drop:
                    conn.execute(f"DROP TABLE scratch_{round_}")  # its result is processed at the next read
                    assert store.outbox._fetch(SQUARE, {"n": 7}) == [{"sq": 49}]
                else:
                    conn.execute(f"DROP TABLE scratch_{round_}")
                    assert conn._pipeline is not None
                    conn._pipeline.sync()  # its result processed, and the DEALLOCATE ALL sent, before the next send
                assert store.outbox._fetch(SQUARE, {"n": 5}) == [{"sq": 25}]
                assert store.outbox._fetch(PICK, {"n": 0}) == []
            with database.transaction(pipelined=True) as store:
                assert store.outbox._fetch(SQUARE, {"n": 3}) == [{"sq": 9}]
