"""Statements sent into a connection's pipeline without a cursor: converted once, prepared once, read directly.

In pipeline mode (the simulator's connection: `DedicatedDatabase`; a pipelined
transaction) a psycopg cursor costs every statement its conversion (the text encoded
and looked up again), its prepare bookkeeping, a socket write of its own and the
pipeline's matching of results to cursors: most of a simulated day's client work.
Here a statement's text is converted once per connection, and prepared at its first
use under a name of its own per set of parameter types (psycopg picks a parameter's
type from its value: an int may go as int2, int4 or int8). A send only dumps the
parameters (each type's dumper chosen once per statement, by its `Transformer`) and
queues the prepare, when one is due, and the execution in psycopg's pipeline, in
order with everything else queued there (BEGIN, COMMIT, cursors' statements). Nothing
goes out until something is read: the read sends what is queued and asks for results
(a flush), as a cursor's fetch does.

Errors are psycopg's: a statement's result is matched by the pipeline like a cursor's,
the first error among the results fetched is raised by the read that fetched it (a
failing statement's own error, or that of an earlier one nobody read), and a result
skipped after an error raises `PipelineAborted`. A prepare that did not succeed (it
failed, or an earlier error made the server skip it) is forgotten, so the statement is
prepared again at its next send.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import errors as e
from psycopg._queries import PostgresQuery
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ExecStatus

TUPLES_OK = ExecStatus.TUPLES_OK
COMMAND_OK = ExecStatus.COMMAND_OK
FATAL_ERROR = ExecStatus.FATAL_ERROR
PIPELINE_ABORTED = ExecStatus.PIPELINE_ABORTED
_STATEMENTS = "_tickwarden_prepared"  # the connection's attribute: statement text -> `_Statement`
# Statement texts prepared on one connection at most; one more goes through a cursor instead (whose
# prepared statements psycopg keeps in a bounded cache of its own). A simulated day uses about 50; a
# long-lived pooled connection (the ticker's pipelined transactions) may meet texts completed with
# constants that change (the months a statement names), and a prepared statement holds its plan
# on the server for as long as the session lasts.
MAX_STATEMENTS = 128
_NAMES = itertools.count()  # names prepared statements apart within the process (and so on each connection)


def _supported() -> bool:
    """Whether this psycopg has the members of its pipeline, query and transformer the path uses.

    They are psycopg's own, not its public interface: a release without one of them sends
    every statement through a cursor (as psycopg's public path), not into a broken pipeline.
    """
    from psycopg._pipeline import Pipeline

    from psycopg._preparing import PrepareManager

    wanted = [(Pipeline, ("_communicate_gen", "_fetch_gen")), (PostgresQuery, ("convert",)),
              (PrepareManager, ("clear", "maintain_gen")),
              (Transformer, ("dump_sequence", "load_rows", "set_pgresult"))]
    if not all(hasattr(owner, member) for owner, members in wanted for member in members):
        return False
    try:
        probe = PostgresQuery(Transformer())
        probe.convert("SELECT %(x)s", {"x": 1})
        return isinstance(probe.query, bytes) and probe._order == ["x"] and hasattr(probe, "_want_formats")
    except Exception:  # any other shape of psycopg's query conversion
        return False


SUPPORTED = _supported()


def usable(conn: psycopg.Connection[Any]) -> bool:
    """Whether `conn` is in pipeline mode and prepares statements (`prepare_threshold` not None)."""
    pipeline = conn._pipeline
    return (SUPPORTED and pipeline is not None and conn.prepare_threshold is not None
            and hasattr(pipeline, "command_queue") and hasattr(pipeline, "result_queue"))


class _Statement:
    """One statement text on one connection: its converted query, its dumpers and loaders, its prepared names."""

    __slots__ = ("query", "order", "formats", "tx", "names", "columns")

    def __init__(self, conn: psycopg.Connection[Any], text: str, params: dict[str, Any]):
        self.tx = Transformer(conn)
        converted = PostgresQuery(self.tx)
        converted.convert(text, params)
        self.query: bytes = converted.query
        self.order: list[str] | None = converted._order
        self.formats: list[PyFormat] = converted._want_formats or []
        self.names: dict[tuple[int, ...], bytes] = {}  # parameter types -> the name prepared with them
        self.columns: tuple[int, Callable[[Sequence[Any]], dict[str, Any]]] | None = None  # see `make_dict`

    def make_dict(self, result: psycopg.pq.abc.PGresult) -> Callable[[Sequence[Any]], dict[str, Any]]:
        """A row maker of dicts, its column names decoded once per statement (while their count agrees)."""
        made = self.columns
        if made is None or made[0] != result.nfields:
            encoding = self.tx.encoding
            names = [(result.fname(i) or b"").decode(encoding) for i in range(result.nfields)]

            def make(values: Sequence[Any]) -> dict[str, Any]:
                return dict(zip(names, values, strict=False))

            made = self.columns = (result.nfields, make)
        return made[1]


class _Prepare:
    """The pipeline's entry for a prepare: forgets the name unless it succeeded."""

    __slots__ = ("statement", "types", "name")

    def __init__(self, statement: _Statement, types: tuple[int, ...], name: bytes):
        self.statement, self.types, self.name = statement, types, name

    def _check_results(self, results: list[psycopg.pq.abc.PGresult]) -> None:
        if results[0].status != COMMAND_OK:
            if self.statement.names.get(self.types) == self.name:
                del self.statement.names[self.types]
            _raise(results[0], self.statement.tx.encoding)

    def _set_results(self, results: list[psycopg.pq.abc.PGresult]) -> None:
        pass


class Sent:
    """A statement sent into the pipeline: its result once read (`rows`, `count`)."""

    __slots__ = ("conn", "statement", "result")

    def __init__(self, conn: psycopg.Connection[Any], statement: _Statement):
        self.conn, self.statement = conn, statement
        self.result: psycopg.pq.abc.PGresult | None = None

    # The pipeline hands results to what it queued with these two, as to a cursor.
    def _check_results(self, results: list[psycopg.pq.abc.PGresult]) -> None:
        self.result = results[0]
        if results[0].status not in (TUPLES_OK, COMMAND_OK):
            _raise(results[0], self.statement.tx.encoding)

    def _set_results(self, results: list[psycopg.pq.abc.PGresult]) -> None:
        pass

    def _arrived(self) -> psycopg.pq.abc.PGresult:
        """The statement's result: sends what is queued and waits for it if it has not arrived; raises its error."""
        result = self.result
        if result is None:
            conn = self.conn
            pipeline = conn._pipeline
            if pipeline is None:
                raise e.ProgrammingError("the pipeline that carried the statement has ended without its result")
            with conn.lock:
                # The flush request goes out with what is queued, in the same write: the server
                # then sends every result so far, and the read waits for them (a cursor's fetch
                # writes the queue, then the request, then waits).
                pipeline.command_queue.append(conn.pgconn.send_flush_request)
                conn.wait(self._read_gen(pipeline))
            result = self.result
            if result is None:
                raise e.ProgrammingError("no result available")
        if result.status not in (TUPLES_OK, COMMAND_OK):
            _raise(result, self.statement.tx.encoding)
        return result

    def _read_gen(self, pipeline: Any) -> Any:
        yield from pipeline._communicate_gen()  # sends what is queued, processes what has arrived
        if self.result is None:
            yield from pipeline._fetch_gen(flush=False)

    def rows(self, shape: str) -> list[Any] | None:
        """The rows, as tuples (`shape` "tuple") or dicts ("dict"); None for a statement that returns none."""
        result = self._arrived()
        if result.status != TUPLES_OK:
            return None
        tx = self.statement.tx
        tx.set_pgresult(result)
        make: Any = tuple if shape == "tuple" else self.statement.make_dict(result)
        return tx.load_rows(0, result.ntuples, make)

    def count(self) -> int:
        """The rows the statement returned or changed, as a cursor's `rowcount`."""
        result = self._arrived()
        if result.status == TUPLES_OK:
            return result.ntuples
        changed = result.command_tuples
        return changed if changed is not None else -1

    def columns(self) -> list[str]:
        """The names of the result's columns."""
        result = self._arrived()
        encoding = self.statement.tx.encoding
        return [(result.fname(i) or b"").decode(encoding) for i in range(result.nfields)]


def _raise(result: psycopg.pq.abc.PGresult, encoding: str) -> None:
    if result.status == FATAL_ERROR:
        raise e.error_from_result(result, encoding=encoding)
    if result.status == PIPELINE_ABORTED:
        raise e.PipelineAborted("pipeline aborted")
    raise e.InternalError(f"unexpected result status from query: {ExecStatus(result.status).name}")


def _watch_deallocations(conn: psycopg.Connection[Any]) -> dict[str, _Statement]:
    """The connection's statements, forgotten whenever psycopg deallocates every prepared statement.

    psycopg sends DEALLOCATE ALL when a DROP, ALTER, ROLLBACK or DISCARD ALL runs on a cursor while
    it holds prepared statements of its own (`PrepareManager.clear`, which says whether it will):
    that removes these too, so their names are forgotten with its own and prepared again at their
    next send, after the DEALLOCATE ALL (`send` queues a pending one first).
    """
    statements: dict[str, _Statement] = {}
    manager = conn._prepared
    clear = manager.clear

    def cleared() -> bool:
        deallocating = clear()
        if deallocating:
            for statement in statements.values():
                statement.names.clear()
        return deallocating

    manager.clear = cleared  # type: ignore[method-assign]
    return statements


def send(conn: psycopg.Connection[Any], text: str, params: dict[str, Any] | None) -> Sent | None:
    """Queue `text` with `params` in `conn`'s pipeline (see the module); None when it goes through a cursor instead.

    1. Convert the text, once per connection.
    2. Dump the parameters, in the order of their placeholders.
    3. Queue a prepare under a new name when none was made with these parameter types.
    4. Queue the execution, with what will receive its result.
    """
    if params is not None and type(params) is not dict:
        return None  # positional parameters: a cursor's (the store names its parameters)
    pipeline = conn._pipeline
    assert pipeline is not None
    statements: dict[str, _Statement] | None = conn.__dict__.get(_STATEMENTS)
    if statements is None:
        statements = conn.__dict__[_STATEMENTS] = _watch_deallocations(conn)
    statement = statements.get(text)
    params = params or {}
    if statement is None:
        if len(statements) >= MAX_STATEMENTS:
            return None
        statement = statements[text] = _Statement(conn, text, params)
    tx = statement.tx
    order = statement.order
    if order:
        try:
            values = [params[key] for key in order]
        except KeyError:
            missing = ", ".join(sorted(key for key in order if key not in params))
            raise e.ProgrammingError(f"query parameter missing: {missing}") from None
        dumped = tx.dump_sequence(values, statement.formats)
        types: tuple[int, ...] = tx.types or ()
        formats = tx.formats
    else:
        dumped, types, formats = [], (), []
    pgconn = conn.pgconn
    name = statement.names.get(types)
    if name is None:
        manager = conn._prepared
        if manager._to_flush:
            # psycopg owes the server a DEALLOCATE (ALL): queued ahead of this prepare, not after it
            conn.wait(manager.maintain_gen(conn))
        name = statement.names[types] = b"tickwarden_%d" % next(_NAMES)
        pipeline.command_queue.append(functools.partial(pgconn.send_prepare, name, statement.query, param_types=types))
        pipeline.result_queue.append((_Prepare(statement, types, name), None))  # type: ignore[arg-type]
    sent = Sent(conn, statement)
    pipeline.command_queue.append(functools.partial(pgconn.send_query_prepared, name, dumped, param_formats=formats))
    pipeline.result_queue.append((sent, None))  # type: ignore[arg-type]
    return sent
