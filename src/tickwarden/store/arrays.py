"""Array parameters dumped in one step: a list of ints, datetimes or strings as one binary array.

psycopg dumps a plain list element by element: it walks the list to choose the element's
adapter (for integers, the smallest type that holds the largest), then calls that adapter
once per element, about 1.5 µs for a datetime. The loops' batch statements send some
40,000 lists a simulated day (a deadline pass sends three per watermark it moves). A list
wrapped in one of these classes is dumped by one `struct.pack` of the whole array in
PostgreSQL's binary array format instead. Every statement that receives one casts it
(`%(x)s::bigint[]`), so the element type it is sent as changes no result.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

INT8, INT8_ARRAY = 20, 1016
TEXT, TEXT_ARRAY = 25, 1009
TIMESTAMPTZ, TIMESTAMPTZ_ARRAY = 1184, 1185
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # a binary timestamptz counts microseconds from here
ONE_MICROSECOND = timedelta(microseconds=1)
_NULL = struct.pack("!i", -1)
_LENGTH_8 = struct.pack("!i", 8)  # the length word of every 8-byte element
_PACK_Q = struct.Struct("!q").pack
_PACK_I = struct.Struct("!i").pack
_HEADER = struct.Struct("!iiiii")  # dimensions, has nulls, element type, length, lower bound
_EMPTY = struct.Struct("!iii")  # an empty array has no dimension


class BigintArray(list[int | None]):
    """Integers (None for NULL) sent as one `bigint[]`."""


class TimestamptzArray(list[datetime | None]):
    """Aware datetimes (None for NULL) sent as one `timestamptz[]`."""


class TextArray(list[str | None]):
    """Strings (None for NULL) sent as one `text[]`."""


def _pack_int8(element: int, values: list[int | None]) -> bytes:
    """The binary array of 8-byte integers `values` (element type `element`).

    Most arrays the loops send hold one to three elements: the body is the packed
    integers joined by their length word (every element is `[8][int64]`), a `join` over
    a `map` of one packing function, with no call per element of Python's own.
    """
    if None in values:
        body = b"".join([_NULL if v is None else _LENGTH_8 + _PACK_Q(v) for v in values])
        return _HEADER.pack(1, 1, element, len(values), 1) + body
    if not values:
        return _EMPTY.pack(0, 0, element)
    return _HEADER.pack(1, 0, element, len(values), 1) + _LENGTH_8 + _LENGTH_8.join(map(_PACK_Q, values))


class _ArrayDumper(Dumper):
    """A binary dumper whose type is set per instance, so that it is not registered by oid (COPY's lookup)."""

    format = Format.BINARY
    array_oid = 0

    def __init__(self, cls: type, context: Any = None):
        super().__init__(cls, context)
        self.oid = self.array_oid


class BigintArrayDumper(_ArrayDumper):
    array_oid = INT8_ARRAY

    def dump(self, obj: BigintArray) -> bytes:
        return _pack_int8(INT8, obj)


class TimestamptzArrayDumper(_ArrayDumper):
    array_oid = TIMESTAMPTZ_ARRAY

    def dump(self, obj: TimestamptzArray) -> bytes:
        # An aware datetime minus the epoch is exact; a naive one raises TypeError here, as it
        # must: a timestamptz is never guessed from the session's zone.
        return _pack_int8(TIMESTAMPTZ, [None if v is None else (v - PG_EPOCH) // ONE_MICROSECOND for v in obj])


class TextArrayDumper(_ArrayDumper):
    array_oid = TEXT_ARRAY

    def dump(self, obj: TextArray) -> bytes:
        n = len(obj)
        if not n:
            return _EMPTY.pack(0, 0, TEXT)
        # Each element is its length word, then its bytes (`b`, encoded once per element).
        body = b"".join([_NULL if v is None else _PACK_I(len(b := v.encode())) + b for v in obj])  # a list: no generator
        return _HEADER.pack(1, 1 if None in obj else 0, TEXT, n, 1) + body


def register(adapters: psycopg.adapt.AdaptersMap) -> None:
    """Dump the array classes of this module with their dumpers on every connection made from `adapters`."""
    adapters.register_dumper(BigintArray, BigintArrayDumper)
    adapters.register_dumper(TimestamptzArray, TimestamptzArrayDumper)
    adapters.register_dumper(TextArray, TextArrayDumper)
