"""The store's array parameters reach PostgreSQL as the values they hold, whichever placeholder receives them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from psycopg.pq import Format
import pytest

from tests.dbutil import TEST_URL
from tickwarden.store import base  # registers the array dumpers and the JSON loads
from tickwarden.store.arrays import BigintArray, TextArray, TimestamptzArray
from tickwarden.store.ledger import TickGroup, expire_params, tick_params
from tickwarden.store.trigger import Advance

T0 = datetime(2026, 11, 1, 9, 30, 15, 123456, tzinfo=UTC)


@pytest.fixture
def conn():
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize("placeholder", ["s", "b"])
@pytest.mark.parametrize(("values", "sql_type"), [
    (BigintArray([1, 2, 2**40, -7]), "bigint"),
    (BigintArray([3, None, 5]), "bigint"),
    (BigintArray([]), "bigint"),
    (TimestamptzArray([T0, T0 - timedelta(days=9000), datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]),
     "timestamptz"),
    (TimestamptzArray([None, T0]), "timestamptz"),
    (TimestamptzArray([]), "timestamptz"),
    (TextArray(["{1,2,3}", "é \"quoted\" ,{}", "", None]), "text"),
    (TextArray([]), "text"),
])
def test_it_sends_an_array_as_the_values_it_holds(conn, placeholder, values, sql_type):
    same, back = conn.execute(
        f"SELECT %(v){placeholder}::{sql_type}[] IS NOT DISTINCT FROM %(plain)s::{sql_type}[], %(v){placeholder}::{sql_type}[]",
        {"v": values, "plain": list(values)},
    ).fetchone()
    assert same
    assert back == list(values)


def test_it_casts_integers_to_a_narrower_array_type(conn):
    assert conn.execute("SELECT %s::integer[]", (BigintArray([1, 2, 3]),)).fetchone()[0] == [1, 2, 3]


def test_it_refuses_a_naive_datetime(conn):
    with pytest.raises(TypeError):
        conn.execute("SELECT %s::timestamptz[]", (TimestamptzArray([datetime(2026, 11, 1)]),))


def test_the_ledger_sends_its_batch_columns_as_store_arrays():
    group = TickGroup("{1,2}", "{3,3}", ((T0, T0 + timedelta(hours=1)),), 2, (30, 60), 1)
    params = tick_params([group], T0, [Advance("{9}", T0 + timedelta(minutes=5), T0)])
    assert isinstance(params["scheduled_fors"], TimestamptzArray)
    assert isinstance(params["advance_next"], TimestamptzArray)
    assert isinstance(params["tick_groups"], BigintArray)
    assert isinstance(params["workflow_ids"], TextArray)
    reaped = expire_params(T0, [{"id": 4, "run_scheduled_for": T0, "ahead": False}])
    assert isinstance(reaped["attempt_ids"], BigintArray)
    assert isinstance(reaped["run_scheduled_fors"], TimestamptzArray)



def test_an_empty_json_object_is_read_as_a_fresh_dict_each_time_and_others_are_parsed(conn):
    first, second, other = conn.execute("SELECT '{}'::jsonb, '{}'::json, '{\"a\": [1, {}]}'::jsonb").fetchone()
    assert first == {} and second == {} and first is not second
    first["x"] = 1
    assert conn.execute("SELECT '{}'::jsonb").fetchone()[0] == {}
    assert other == {"a": [1, {}]}


def test_the_store_reads_an_empty_json_object_without_parsing_it(monkeypatch):
    parsed = []
    monkeypatch.setattr(base.json, "loads", lambda data: parsed.append(data) or {"parsed": True})
    assert base._json_loads(b"{}") == {}
    assert base._json_loads(b'{"a": 1}') == {"parsed": True}
    assert parsed == [b'{"a": 1}']


def test_json_read_as_text_is_loaded_in_the_stores_loader_alone(conn, monkeypatch):
    """One call a value: the store's loader parses (or not, for `{}`) without psycopg's loader calling a function."""
    assert conn.adapters.get_loader(psycopg.adapters.types["jsonb"].oid, Format.TEXT) is base._TextJsonLoader
    parsed = []
    monkeypatch.setattr(base.json, "loads", lambda data: parsed.append(data) or {"parsed": True})
    monkeypatch.setattr(base, "_json_loads", lambda data: pytest.fail("psycopg's loader was used"))
    row = conn.execute("SELECT '{}'::jsonb, '{\"a\": 1}'::jsonb, '[1]'::json").fetchone()
    assert row == ({}, {"parsed": True}, {"parsed": True})
    assert parsed == [b'{"a": 1}', b"[1]"]
