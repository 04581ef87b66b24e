"""`store.base._dump`: a kept cursor's parameters dumped as psycopg's `PostgresQuery.dump` dumps them."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from psycopg.adapt import Transformer
from psycopg.types.json import Jsonb
from psycopg._queries import PostgresQuery

from tickwarden.store.arrays import BigintArray, TimestamptzArray
from tickwarden.store.base import _dump

TEXT = "SELECT %(a)s::bigint, %(at)b::timestamptz, %(a)s::bigint, %(ids)s::bigint[], %(when)s::timestamptz[], %(doc)s"
T0 = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)


def _converted(text: str, params: dict | None) -> PostgresQuery:
    query = PostgresQuery(Transformer())
    query.convert(text, params)
    return query


@pytest.mark.parametrize("params", [
    {"a": 7, "at": T0, "ids": BigintArray([1, 2]), "when": TimestamptzArray([T0]), "doc": Jsonb({"k": 1})},
    {"a": None, "at": None, "ids": BigintArray([]), "when": TimestamptzArray([None]), "doc": None, "unused": 3},
    {"a": 2**40, "at": T0, "ids": [4, None], "when": [T0], "doc": "text"},
])
def test_it_dumps_the_parameters_types_and_formats_psycopg_dumps(params):
    first = {"a": 1, "at": T0, "ids": BigintArray([1]), "when": TimestamptzArray([T0]), "doc": Jsonb({})}
    theirs, ours = _converted(TEXT, first), _converted(TEXT, first)
    theirs.dump(params)
    _dump(ours, params)
    assert (ours.params, ours.types, ours.formats) == (theirs.params, theirs.types, theirs.formats)
    assert ours.params is not None and len(ours.params) == 5  # `a` twice is one parameter


def test_it_checks_nothing_psycopg_checked_at_the_conversion(monkeypatch):
    query = _converted(TEXT, {"a": 1, "at": T0, "ids": BigintArray([1]), "when": TimestamptzArray([T0]), "doc": None})
    checks: list[object] = []
    real = PostgresQuery.validate_and_reorder_params
    monkeypatch.setattr(PostgresQuery, "validate_and_reorder_params",
                        staticmethod(lambda *args: checks.append(args) or real(*args)))
    params = {"a": 2, "at": T0, "ids": BigintArray([3]), "when": TimestamptzArray([]), "doc": None}
    _dump(query, params)
    assert checks == []
    theirs = _converted(TEXT, params)
    assert len(checks) == 1 and (query.params, query.types) == (theirs.params, theirs.types)


def test_a_missing_parameter_raises_psycopgs_own_error():
    query = _converted(TEXT, {"a": 1, "at": T0, "ids": BigintArray([1]), "when": TimestamptzArray([T0]), "doc": None})
    with pytest.raises(psycopg.ProgrammingError, match="query parameter missing: doc, ids"):
        _dump(query, {"a": 2, "at": T0, "when": TimestamptzArray([])})


@pytest.mark.parametrize(("text", "first", "params"), [
    ("BEGIN", None, None),  # a command sent without parameters, as `_exchange` sends it
    ("SELECT 1", {}, {}),  # no placeholders: nothing to dump
    ("SELECT %s::int", (1,), (2,)),  # positional: psycopg's own dump
])
def test_no_parameters_or_a_sequence_of_them_are_psycopgs_dump(text, first, params):
    theirs, ours = _converted(text, first), _converted(text, first)
    theirs.dump(params)
    _dump(ours, params)
    assert (ours.params, ours.types, ours.formats) == (theirs.params, theirs.types, theirs.formats)
