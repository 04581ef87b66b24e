"""The one place that turns query names into executed statements."""

from __future__ import annotations

import functools
import json
import types
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import fields
from datetime import datetime
from itertools import repeat
from typing import Any, Literal, TypeVar, get_origin, get_type_hints, overload

import psycopg
import psycopg.types.json
from psycopg.pq import ExecStatus, PipelineStatus
from psycopg.rows import Row, dict_row

from tickwarden.pipeline import pipeline, tested_pipeline
from tickwarden.store import arrays
from tickwarden.store.queries import queries

TUPLES_OK = ExecStatus.TUPLES_OK
COMMAND_OK = ExecStatus.COMMAND_OK
R = TypeVar("R")
arrays.register(psycopg.adapters)  # every connection dumps the store's array parameters in one step


def _json_loads(data: str | bytes) -> Any:
    """`json.loads`, but the empty object, which most jsonb values read are (a leased attempt's outputs), unparsed."""
    return {} if data == b"{}" else json.loads(data)


psycopg.types.json.set_json_loads(_json_loads)  # every connection of the process


class _TextJsonLoader(psycopg.types.json.JsonbLoader):
    """The text json and jsonb loader of every connection: `_json_loads` in the loader's own call.

    psycopg's loader calls the loads function from its `load`, two calls a value, and
    a simulated day reads some 18,000 (nearly all the empty outputs of leased attempts).
    A connection given a loads function of its own (`set_json_loads` with a context) has
    psycopg's loader again, which calls that function.
    """

    def load(self, data: Any) -> Any:
        if data == b"{}":  # compares equal as bytes or as a memoryview
            return {}
        return json.loads(data if isinstance(data, bytes) else bytes(data))


for _name in ("json", "jsonb"):
    psycopg.adapters.register_loader(_name, _TextJsonLoader)

_CHECKED: set[tuple[str, type]] = set()  # (query, dataclass) pairs whose columns `_records` checked
# Cursors kept on their connection (an attribute of its own, so they go with it), one per statement
# text and use (see `_take`).
_KEPT = "_tickwarden_kept_cursors"
# More cursors for a statement text and use whose kept one was back already when they were given back:
# statements submitted again before their rows were read (`_keep`), reused before any new one is made.
_SPARES = "_tickwarden_spare_cursors"
KEEP_SPARES = 16  # spare cursors kept for one statement text and use; a cursor given back beyond them is closed
_ROWS = "_tickwarden_dict_rows"  # statement text -> the row factory of its dict cursors on the connection
KEEP_ROWS = 64  # a cursor that read more rows is closed rather than kept: a kept one holds its last result
SQL_TYPES = {int: "bigint", str: "text", bool: "boolean", float: "double precision", datetime: "timestamptz",
             dict: "jsonb"}


def _jsonb_array(values: list[Any]) -> list[Any]:
    return [None if v is None else psycopg.types.json.Jsonb(v) for v in values]


# How `_batch` sends a field of each SQL type: one array in one step where the store has one (`arrays`).
ARRAYS: dict[str, Callable[[list[Any]], list[Any]]] = {
    "bigint": arrays.BigintArray, "text": arrays.TextArray, "timestamptz": arrays.TimestamptzArray,
    "jsonb": _jsonb_array}


def _base_type(hint: Any) -> type:
    """The type of a field's annotation, without its `| None` or its parameters (`dict[str, Any]`: dict)."""
    base: Any = next(a for a in hint.__args__ if a is not type(None)) if isinstance(hint, types.UnionType) else hint
    found: type = get_origin(base) or base
    return found


@functools.cache
def batch_columns(cls: type) -> tuple[tuple[str, Callable[[list[Any]], list[Any]]], ...]:
    """Each field of dataclass `cls` with what `_batch` sends its values as."""
    hints = get_type_hints(cls)
    return tuple((f.name, ARRAYS.get(SQL_TYPES[_base_type(hints[f.name])], list)) for f in fields(cls))


@functools.cache
def unnested(name: str, cls: type) -> str:
    """Query `name` with its `{unnest}` standing for `unnest(%(field)s::type[], ...) AS w (field, ...)`.

    The fields of dataclass `cls` are listed once, in the class: a batch statement names
    them as `w.field`, and `StoreBase._batch` sends one array per field under its name.
    Timestamps go in binary (see `queries`); a field's SQL type follows from its annotation.
    `{unnest_numbered}` is the same `WITH ORDINALITY`, with `w.ord` as well: each row's
    position in the batch, from 1 (for a statement that must keep or give back its order).
    """
    hints = get_type_hints(cls)
    parts, names = [], []
    for field in fields(cls):
        base = _base_type(hints[field.name])
        parts.append(f"%({field.name}){'b' if base is datetime else 's'}::{SQL_TYPES[base]}[]")
        names.append(field.name)
    arrays_of = f"unnest({', '.join(parts)})"
    return (queries()[name]
            .replace("{unnest}", f"{arrays_of} AS w ({', '.join(names)})")
            .replace("{unnest_numbered}", f"{arrays_of} WITH ORDINALITY AS w ({', '.join([*names, 'ord'])})"))


def _read(cur: psycopg.Cursor[Row]) -> list[Row] | None:
    """The rows of the statement `cur` just executed, or None for a statement that returns none.

    The result's status, not `cur.description`: that builds a Column object per column on
    every call, a sizeable cost on the loops' hottest statements. In pipeline mode (the
    simulator's transactions: `DedicatedDatabase.transaction`) the result has not arrived
    when `execute` returns: it is asked for here, so every statement's rows, row count and
    error are known before the caller goes on, as outside pipeline mode.
    """
    result = cur.pgresult
    if result is None and cur.connection.pgconn.pipeline_status != PipelineStatus.OFF:
        try:
            return cur.fetchall()
        except psycopg.ProgrammingError:
            result = cur.pgresult  # a command, which has no rows to fetch, or an error to raise
            if result is None or result.status != COMMAND_OK:
                raise
            return None
    return cur.fetchall() if result is not None and result.status == TUPLES_OK else None


def text_of(statement: str) -> str:
    """The text of `statement`: a query's name, or a named query's text its caller completed (`ledger.in_months`).

    A name is one word, a text never is; an unknown name still raises KeyError.
    """
    return statement if " " in statement else queries()[statement]


class _DictRows:
    """`dict_row` for a kept cursor, which runs one statement text: its column names are decoded once.

    psycopg's `dict_row` decodes every column name of every result again; a statement's
    text fixes its columns, so the cursors made for it on one connection (`_take`: a kept
    one, or a new one where a large result closed the last) reuse the names of its first
    result with rows for as long as the count of columns agrees.
    """

    __slots__ = ("make",)

    def __init__(self) -> None:
        self.make: tuple[int, Callable[[Sequence[Any]], dict[str, Any]]] | None = None

    def __call__(self, cursor: psycopg.Cursor[Any]) -> Callable[[Sequence[Any]], dict[str, Any]]:
        result = cursor.pgresult
        if result is None or result.status != TUPLES_OK:
            return dict_row(cursor)  # no rows to make (a command, an error): as psycopg answers
        made = self.make
        if made is None or made[0] != result.nfields:
            names = [result.fname(i).decode(cursor._encoding) for i in range(result.nfields)]  # type: ignore[union-attr]

            def make(values: Sequence[Any]) -> dict[str, Any]:
                return dict(zip(names, values, strict=False))

            made = self.make = (result.nfields, make)
        return made[1]


def _take(conn: psycopg.Connection[Any], key: tuple[str, str, int]) -> psycopg.Cursor[Any]:
    """The cursor kept for `key` (statement text, row shape, occurrence), or else a spare of it (`_keep`),
    taken out while it runs; or a new one.

    psycopg keeps a cursor's adapters only while the cursor runs the same query object
    again: a fresh cursor chooses the dumper of every parameter anew (for an array, by
    walking it) and the loader of every column, which cost the worker's outcome statement
    as much as the rest of its client work. A cursor goes back (`_keep`) only once its
    rows are read, so an error, or a statement run again before its rows are read, never
    shares one. The exception is `_send`'s kind: nobody reads those results at all.

    A cursor whose statement fails (to send, to run or to be read) is closed by its user
    instead: a result may still be owed to it. Each use says so with `try`/`except`
    rather than a context manager: that wraps every statement (some 38,000 uses a
    simulated day) and costs three calls each time where `try` costs none.
    """
    kept: dict[tuple[str, str, int], psycopg.Cursor[Any]] | None = conn.__dict__.get(_KEPT)
    cur = kept.pop(key, None) if kept else None
    if cur is None:
        spares: dict[tuple[str, str, int], list[psycopg.Cursor[Any]]] | None = conn.__dict__.get(_SPARES)
        stack = spares.get(key) if spares else None
        if stack:
            return stack.pop()
        if key[1] != "dict":
            return conn.cursor()
        rows: dict[str, _DictRows] = conn.__dict__.setdefault(_ROWS, {})
        factory = rows.get(key[0])
        if factory is None:
            factory = rows[key[0]] = _DictRows()
        return conn.cursor(row_factory=factory)
    return cur


def _keep(conn: psycopg.Connection[Any], key: tuple[str, str, int], cur: psycopg.Cursor[Any], rows: int) -> None:
    """Give `cur` back for `key` once its rows are read: kept, a spare, or closed.

    A statement submitted again before its rows are read runs on a cursor of its own
    (`_take`); when their rows are read, the first cursor given back is kept, the others
    become spares of the same key, taken next time before any new cursor is made. Were
    each given back to the one place, it would push out the one there: a cursor made and
    dropped at every such overlap (the notifier's records of one pass: some ten a simulated
    day), each still held, with its last result, by `_run`'s registry. Every cursor given
    back is thus either reused or closed, and leaves the registry when closed here.
    """
    if rows <= KEEP_ROWS:
        if conn.__dict__.setdefault(_KEPT, {}).setdefault(key, cur) is cur:
            return
        stack = conn.__dict__.setdefault(_SPARES, {}).setdefault(key, [])
        if len(stack) < KEEP_SPARES:
            stack.append(cur)
            return
    cur.close()
    converted = conn.__dict__.get(_CONVERTED)
    if converted:
        converted.pop(id(cur), None)  # its query with it (see `_run`)


CONVERTED_MAX = 1024  # entries of `_run`'s registry on one connection before it is pruned (`_pruned`)


def _pruned(conn: psycopg.Connection[Any], converted: dict[int, tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
    """`_run`'s registry once it is full, left with the entries of the cursors kept or spare on the connection.

    The others are of cursors that will not run their statement again through `_run`: one
    whose rows were never read (a reader dropped), one closed where its statement failed
    (that a `_take` caller closes, not `_keep`), or one taken out now, which registers again
    at its next use. Dropping every entry instead would send each kept cursor's next
    statement through psycopg's `execute` and convert it again. When the kept and spare
    ones fill half the registry themselves (statement texts without end), it starts empty,
    so that a prune is never repeated at every statement.
    """
    live = {id(cur) for cur in (conn.__dict__.get(_KEPT) or {}).values()}
    for stack in (conn.__dict__.get(_SPARES) or {}).values():
        live.update(id(cur) for cur in stack)
    kept = {key: entry for key, entry in converted.items() if key in live}
    pruned = conn.__dict__[_CONVERTED] = kept if len(kept) < CONVERTED_MAX // 2 else {}
    return pruned


_CONVERTED = "_tickwarden_converted"  # the connection's attribute: id of a kept cursor -> see `_run`, `_pruned`


def _psycopg_internals(version: str = psycopg.__version__) -> bool:
    """Whether `_run` may send prepared statements itself: a psycopg release it is tested with
    (`tickwarden.pipeline.PSYCOPG_TESTED`; under any other, every statement takes psycopg's own
    `execute`), whose cursor, pipeline and prepared-statement cache have the members it uses."""
    if not tested_pipeline(version):
        return False
    try:
        from psycopg._preparing import PrepareManager
        from psycopg._queries import PostgresQuery
    except ImportError:
        return False
    return ({"_names", "_to_flush", "prepare_threshold"} <= set(vars(PrepareManager()))
            | set(getattr(PrepareManager, "__annotations__", {}))
            and {"_reset", "_last_query", "_tx", "_pgconn", "_closed"} <= set(dir(psycopg.Cursor))
            and hasattr(PostgresQuery, "dump") and hasattr(PostgresQuery, "convert")
            and {"_tx", "_order", "_want_formats", "params", "types", "formats"} <= set(PostgresQuery.__slots__))


_SENDS_PREPARED = _psycopg_internals()


def _dump(pgq: Any, params: dict[str, Any] | None) -> None:
    """`pgq.dump(params)` for the query a kept cursor converted (see `_run`), in two calls rather than four.

    psycopg's `dump` checks the parameters against the query (a sequence or a mapping,
    positional or named placeholders) and orders them, in three calls of its own, at every
    statement `_run` sends itself (nearly every statement of a simulation). The query was converted
    from this same text with a mapping of parameters once already, so its placeholders are
    named (`_order`) or none: only the order is left to do, then the transformer's dump, as
    in `dump`. A parameter missing, or parameters of another kind, take `dump` itself, which
    raises psycopg's own error or dumps them as it would.
    """
    want = pgq._want_formats
    if want is not None and type(params) is dict:
        order = pgq._order
        try:
            values = list(map(params.__getitem__, order)) if order else ()  # no frame of its own, as a comprehension has
        except KeyError:
            pgq.dump(params)  # raises: "query parameter missing: ..."
            raise
        tx = pgq._tx
        pgq.params = tx.dump_sequence(values, want)
        pgq.types = tx.types or ()
        pgq.formats = tx.formats
    else:
        pgq.dump(params)


def _run(cur: psycopg.Cursor[Any], text: str, params: dict[str, Any] | None) -> None:
    """`cur.execute(text, params)`; in pipeline mode, for a statement the connection has prepared, only its send.

    In pipeline mode psycopg's `execute` sends each statement on its own: it converts the
    text and dumps the parameters, then waits for the socket and flushes libpq's buffer,
    one `send` a statement (some 23,000 a simulated day), each waking the server for one
    statement. A kept cursor (see `_take`) runs one text over and over; once psycopg has
    prepared it on the connection, what `execute` sends again is that prepared statement
    with the new parameters. This does just that: the parameters dumped by the query the
    cursor converted the first time (as psycopg's own `executemany` does), the statement
    appended to libpq's buffer, and its result expected in order, where psycopg's pipeline
    hands it to the cursor as it would have. It goes out with the next flush: the next
    statement psycopg sends, the flush of the next read, or the pipeline's sync. The
    server runs what it receives in the order sent, so every statement still runs in
    the order executed; errors surface at the same reads.

    Only when nothing psycopg queued is still unsent (`command_queue`: a BEGIN or COMMIT
    queued by `db._command` goes first), the connection is in autocommit (psycopg would
    otherwise open a transaction first), no deallocation is pending, and the parameters
    dump to the types of a prepared statement. A statement sent without parameters (`params`
    None: an exchange's BEGIN, COMMIT and wake, which `_exchange` has prepared) takes the same
    path once prepared: through psycopg's `execute` each was a flush, a `send` and a wake of the
    server of its own, three more at every attempt than the exchange's one batch. Otherwise, and
    outside pipeline mode, psycopg's own `execute`.
    """
    conn = cur._conn
    pipeline = conn._pipeline
    if pipeline is None or not _SENDS_PREPARED:
        cur.execute(text, params)
        return
    converted: dict[int, tuple[Any, ...]] | None = conn.__dict__.get(_CONVERTED)
    entry = converted.get(id(cur)) if converted else None
    prepared = conn._prepared
    valid = (entry is not None and entry[0] is cur and entry[1] is text and cur._last_query is text
             and entry[2]._tx is cur._tx)
    if valid and conn._autocommit and not prepared._to_flush and not cur._closed:
        pgq = entry[2]  # type: ignore[index]
        with conn.lock:
            cur._reset()
            _dump(pgq, params)
            key = (pgq.query, pgq.types)
            name = prepared._names.get(key)
            if name is not None:
                prepared._names.move_to_end(key)  # as psycopg's `maybe_add_to_cache` for a prepared one
                queued = pipeline.command_queue
                while queued:  # what psycopg queued goes first, into the same buffer (its results are expected already)
                    queued.popleft()()
                cur._pgconn.send_query_prepared(name, pgq.params, param_formats=pgq.formats, result_format=cur.format)
                pipeline.result_queue.append((cur, None))
                return
    cur.execute(text, params)
    if not valid and cur._last_query is text:
        pgq = cur._query_cls(cur._tx)
        pgq.convert(text, params)
        if converted is None:
            converted = conn.__dict__[_CONVERTED] = {}
        elif len(converted) >= CONVERTED_MAX:
            converted = _pruned(conn, converted)
        converted[id(cur)] = (cur, text, pgq)


_BUILDERS: dict[type, Callable[[Sequence[Sequence[Any]]], list[Any]]] = {}  # `record_builder`'s, by class


def record_builder(cls: type[R]) -> Callable[[Sequence[Sequence[Any]]], list[R]]:
    """What builds one `cls` per row of its fields' values in order, as `[cls(*row) for row in rows]` does.

    A frozen dataclass's `__init__` stores each field through `object.__setattr__`, one call
    per field: on the poller's claim (11 columns, a row per outcome) and its evaluation's
    inputs (21 columns) the dearest of the pollers' own work per row after the driver's
    (timeit, 500 claimed rows: 1.2-8 µs a row for `cls(*row)` as the machine's load varies,
    about half of it here). This gives each instance the same values as its `__dict__`, in
    field order, with no Python code run per row (the loops are `map`'s): instances equal to
    `cls(*row)` in every field, repr and hash, and as frozen. A class whose `__init__` does
    more than store its fields (a `__post_init__`, a field left out of `__init__`, slots: no
    `__dict__` to set) is built by `cls(*row)` itself. Made once per class.
    """
    made = _BUILDERS.get(cls)
    if made is None:
        made = _BUILDERS[cls] = _builder(cls)
    return made


def _builder(cls: type[R]) -> Callable[[Sequence[Sequence[Any]]], list[R]]:
    names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or hasattr(cls, "__slots__") or any(not f.init for f in fields(cls)):  # type: ignore[arg-type]
        return lambda rows: [cls(*row) for row in rows]
    new, assign = object.__new__, object.__setattr__

    def build(rows: Sequence[Sequence[Any]]) -> list[R]:
        # The rows of one result are of one length: the first fails as `cls(*row)` would (zip would cut it)
        if rows and len(rows[0]) != len(names):
            raise ValueError(f"{cls.__name__} takes {len(names)} values a row, not {len(rows[0])}")
        made: list[R] = list(map(new, repeat(cls, len(rows))))
        deque(map(assign, made, repeat("__dict__"), map(dict, map(zip, repeat(names), rows))), maxlen=0)
        return made

    return build


class StoreBase:
    """Runs named queries on one connection (inside the caller's transaction)."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn

    def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self._fetch(queries()[name], params)

    def _batch(self, name: str, rows: Sequence[Any], params: dict[str, Any]) -> list[dict[str, Any]]:
        """Run `name` over `rows`, instances of one dataclass, as arrays of their fields (see `unnested`)."""
        cls = rows[0].__class__
        columns = {name: array([getattr(r, name) for r in rows]) for name, array in batch_columns(cls)}
        return self._fetch(unnested(name, cls), {**params, **columns})

    def _records(self, name: str, params: dict[str, Any], cls: type[R], text: str | None = None) -> list[R]:
        """Run `name` and build one `cls` per row from its columns by position, on hot paths.

        A dict per row and keyword construction cost more than the statement's own client
        work, and so does a frozen dataclass's own `__init__` (`record_builder`); the
        statement's columns are checked once against the dataclass's fields, in order, so a
        column added to one and not the other fails at its first run. `text`:
        the statement as completed by its caller (a constant written into `name`'s text).
        """
        text = text or queries()[name]
        key = (text, "tuple", 0)
        cur = _take(self.conn, key)
        try:
            _run(cur, text, params)
            rows = _read(cur) or []
            if (name, cls) not in _CHECKED:
                columns = [c.name for c in cur.description or ()]
                expected = [f.name for f in fields(cls)]  # type: ignore[arg-type]
                if columns != expected:
                    raise AssertionError(f"{name} returns {columns}, {cls.__name__} has {expected}")
                _CHECKED.add((name, cls))
        except BaseException:
            cur.close()  # see `_take`: a cursor whose statement failed is never kept
            raise
        _keep(self.conn, key, cur, len(rows))
        return record_builder(cls)(rows)

    def _tuples(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run query `name` and return its rows as tuples, on a kept cursor (see `_take`): for a caller that
        reads its columns by position (the ticker's claim, 1,441 passes a simulated day, made a cursor each)."""
        text = queries()[name]
        key = (text, "tuple", 0)
        cur = _take(self.conn, key)
        try:
            _run(cur, text, params)
            rows: list[tuple[Any, ...]] = _read(cur) or []
        except BaseException:
            cur.close()
            raise
        _keep(self.conn, key, cur, len(rows))
        return rows

    def _fetch(self, text: str, params: dict[str, Any] | None) -> list[dict[str, Any]]:
        key = (text, "dict", 0)
        cur = _take(self.conn, key)
        try:
            _run(cur, text, params or {})
            rows: list[dict[str, Any]] = _read(cur) or []
        except BaseException:
            cur.close()
            raise
        _keep(self.conn, key, cur, len(rows))
        return rows

    def _submit(self, name: str, params: dict[str, Any] | None = None) -> Callable[[], list[dict[str, Any]]]:
        """Send query `name` now and return what reads its rows (see `_submit_text`)."""
        return self._submit_text(queries()[name], params)

    @overload
    def _submit_text(self, text: str, params: dict[str, Any] | None) -> Callable[[], list[dict[str, Any]]]: ...

    @overload
    def _submit_text(self, text: str, params: dict[str, Any] | None, *,
                     tuples: Literal[True]) -> Callable[[], list[tuple[Any, ...]]]: ...

    def _submit_text(self, text: str, params: dict[str, Any] | None, *, tuples: bool = False) -> Callable[[], list[Any]]:
        """Send `text` now and return what reads its rows: statements sent before any is read share a round trip.

        `tuples`: its rows as tuples, on a kept cursor of that shape, for a caller that reads its
        columns by position (no dict a row).

        Outside pipeline mode the statement runs here and the reader only hands its rows
        over, as `_rows` would. In pipeline mode (the simulator's connection) it joins the
        pipeline, and the first reader's flush carries every statement sent so far: the
        server still runs them one after the other, in the order sent, so a later one sees
        an earlier one's writes, and an error stops the rest and is raised by its reader.
        """
        key = (text, "tuple" if tuples else "dict", 0)
        cur = _take(self.conn, key)  # out until its rows are read: a statement sent again meanwhile takes another
        try:
            _run(cur, text, params or {})
        except BaseException:
            cur.close()
            raise

        def read() -> list[Any]:
            try:
                rows: list[Any] = _read(cur) or []
            except BaseException:
                cur.close()
                raise
            _keep(self.conn, key, cur, len(rows))
            return rows

        return read

    def _send(self, name: str, params: dict[str, Any] | None = None) -> None:
        """Run a statement whose result nobody reads (a wake-up notification).

        Outside pipeline mode it is a round trip like any other. In pipeline mode (the
        simulator's connection) it only joins the pipeline and goes out with the next
        statement that is read: an error it raised surfaces there, and fails the
        transaction all the same.
        """
        self._send_text(queries()[name], params)

    def _send_text(self, text: str, params: dict[str, Any] | None) -> None:
        """`_send` for a statement completed by its caller (a constant written into a named text)."""
        # Its own kind of kept cursor, shared by the sends of this statement alone: nobody reads what
        # a send returns, so a result still on its way to one is never taken for another's.
        key = (text, "send", 0)
        cur = _take(self.conn, key)
        try:
            _run(cur, text, params or {})
        except BaseException:
            cur.close()
            raise
        _keep(self.conn, key, cur, 0)

    def _exchange(self, statements: Sequence[tuple[str, dict[str, Any]]],
                  tuples: Collection[str] = ()) -> list[list[Any]]:
        """Send named statements together and read their rows after: one round trip, one transaction.

        Each is a query's name or its text as a caller completed it (`text_of`); its rows are
        dicts, or tuples for a statement named in `tuples` (read by position, on a kept cursor
        of that shape: no dict a row, as `_submit_text(tuples=True)`). Only on a
        connection in autocommit outside any transaction: the statements then run in
        the implicit transaction of one pipeline sync, committed together when it is reached or,
        when one fails, rolled back together (and the error raised). The statements `_run` appended
        and the sync leave in one write (`pipeline`'s `one_send`: psycopg's own exit made it three,
        with two waits on the socket, at every attempt of a worker).
        """
        taken: list[tuple[tuple[str, str, int], psycopg.Cursor[Any]]] = []
        try:
            with pipeline(self.conn, one_send=True):
                for name, params in statements:
                    text = text_of(name)
                    # A statement sent twice in one exchange needs a cursor for each of its results.
                    shape = "tuple" if name in tuples else "dict"
                    key = (text, shape, sum(1 for (t, _, _), _ in taken if t is text))
                    cur = _take(self.conn, key)
                    taken.append((key, cur))
                    # A statement without parameters (BEGIN, COMMIT, the wake) goes as its text: no
                    # conversion of placeholders or dumping of an empty mapping (a `%` still needs one).
                    _run(cur, text, params if params or "%" in text else None)
        except BaseException:
            for _, cur in taken:
                cur.close()
            raise
        results = []
        for key, cur in taken:
            result = cur.pgresult
            rows = cur.fetchall() if result is not None and result.status == TUPLES_OK else []
            results.append(rows)
            _keep(self.conn, key, cur, len(rows))
        return results

    def _row(self, name: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        rows = self._rows(name, params)
        return rows[0] if rows else None

    def _execute(self, name: str, params: dict[str, Any] | None = None) -> int:
        text = queries()[name]
        key = (text, "tuple", 0)
        cur = _take(self.conn, key)
        try:
            _run(cur, text, params or {})
            rows = _read(cur)  # in pipeline mode the row count, like the rows, arrives when asked for
            count = cur.rowcount
        except BaseException:
            cur.close()
            raise
        _keep(self.conn, key, cur, len(rows or ()))
        return count

