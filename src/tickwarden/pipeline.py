"""Pipeline mode that raises a failed statement's own error (see `pipeline`), and leaves in one send."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg

# The psycopg releases the store's use of psycopg internals was written against and is tested with (pyproject
# admits no later one): under any other, psycopg's own paths (`store.base._psycopg_internals`, `_one_send_internals`).
PSYCOPG_TESTED = ("3.3.",)


@contextlib.contextmanager
def pipeline(conn: psycopg.Connection, *, one_send: bool = False) -> Iterator[None]:
    """`conn.pipeline()`, raising a failed statement's own error where psycopg raises `PipelineAborted` in its place.

    Leaving a pipeline sends a sync and reads the results left. When a statement failed,
    psycopg raises its error from what the last sends read, and then, if results were
    still to come (the error arrived while the commands after it were being sent: a busy
    machine), raises `PipelineAborted` for the skipped ones from the same exit, with the
    failure as its context only. A caller that acts on the failure (the ticker fires a
    pass again over a unique violation; a deadlock is retried) must see it whatever the
    timing, so the failure is raised.

    `one_send`: leave it as `_one_send` does, the statements still in libpq's buffer and
    the sync going out in one write (a caller that sends everything first and reads after:
    `StoreBase._exchange`).
    """
    try:
        with _one_send(conn) if one_send and _ONE_SEND else conn.pipeline():
            yield
    except psycopg.errors.PipelineAborted as exc:
        failure = exc.__context__
        if isinstance(failure, psycopg.Error) and not isinstance(failure, psycopg.errors.PipelineAborted):
            raise failure from None
        raise


def tested_pipeline(version: str = psycopg.__version__) -> bool:
    """Whether psycopg is a release tickwarden's uses of its internals are tested with, and its pipeline keeps
    the queues they use (the gates of `_one_send` and of `store.base._run`, each checking its other members)."""
    if not version.startswith(PSYCOPG_TESTED):
        return False
    try:
        from psycopg._pipeline_base import BasePipeline
    except ImportError:
        return False
    annotated = getattr(BasePipeline, "__annotations__", {})
    return "command_queue" in annotated and "result_queue" in annotated


def _one_send_internals(version: str = psycopg.__version__) -> bool:
    """Whether `_one_send` may leave a pipeline itself: a psycopg release it is tested with, whose pipeline,
    connection and generators have the members it uses."""
    if not tested_pipeline(version):
        return False
    from psycopg._pipeline_base import BasePipeline

    try:
        from psycopg.generators import send
    except ImportError:
        return False
    return (callable(send)
            and all(callable(getattr(BasePipeline, name, None)) for name in ("_fetch_gen", "_exit"))
            and all(callable(getattr(psycopg.Pipeline, name, None)) for name in ("__enter__", "__exit__"))
            and callable(getattr(psycopg.Connection, "_check_connection_ok", None))
            and callable(getattr(psycopg.Connection, "wait", None))
            and hasattr(psycopg.pq.PGconn, "pipeline_sync"))


_ONE_SEND = _one_send_internals()


@contextlib.contextmanager
def _one_send(conn: psycopg.Connection) -> Iterator[None]:
    """`conn.pipeline()`, whose exit sends the statements left in libpq's buffer and the sync in ONE write.

    psycopg's exit (`BasePipeline._exit_gen`) waits for the socket, flushes the buffer (the
    statements `store.base._run` appended), then sends the sync with a flush of its own,
    waits again, and, its results not in yet, sends a flush request and flushes that: three
    writes and two waits on the socket a pipeline, and the server woken for the statements
    and again for the sync. Here the sync is appended behind the statements and libpq's
    `PQpipelineSync` flushes them together; then every result is read (`_sync_gen`).

    Everything else is psycopg's own: the connection's `_pipeline` is a psycopg `Pipeline`
    entered as `conn.pipeline()` enters it (so `_run`, `execute` and the prepared-statement
    cache see pipeline mode as ever), commands psycopg queued go into the buffer ahead of
    the sync as its exit would send them, each result is handed to its cursor (or to the
    prepared-statement cache) by psycopg's `_fetch_gen`, which reads up to the sync's and
    raises the first error read (the failed statement's own; the later ones, skipped,
    are rolled back with it in the sync's transaction), and psycopg's `_exit` leaves
    pipeline mode unless the connection is broken (psycopg's `OperationalError` raised,
    the connection closed, as before). An error in the block takes psycopg's own exit, as
    does a connection already in a pipeline (the simulator's transactions: nested, psycopg
    syncs and reads there).
    """
    with conn.lock:
        conn._check_connection_ok()
        nested = conn._pipeline is not None
        if not nested:
            line = conn._pipeline = psycopg.Pipeline(conn)  # a reference loop, broken below as psycopg does
    if nested:
        with conn.pipeline():
            yield
        return
    try:
        line.__enter__()
        try:
            yield
        except BaseException as exc:
            line.__exit__(type(exc), exc, exc.__traceback__)  # psycopg's own exit: sync, read all, log its errors
            raise
        try:
            with conn.lock:
                conn.wait(_sync_gen(line))
        finally:
            line._exit(None)  # as psycopg's exit ends: pipeline mode left unless the connection is broken
    finally:
        if line.level == 0:
            with conn.lock:
                conn._pipeline = None


def _sync_gen(line: Any) -> Any:
    """Queued commands and a sync into libpq's buffer, all of it flushed at once, then every result read.

    `PQpipelineSync` flushes the whole buffer (one write, unless the socket takes less:
    `send` writes the rest). With the sync sent, the server sends everything up to its
    result unasked: no flush request. Should the sync itself fail to go into the buffer,
    the results are read as psycopg's exit reads them, after a flush request of its own.
    """
    from psycopg.generators import send

    pgconn = line.pgconn
    queued = line.command_queue
    synced = False
    try:
        while queued:  # psycopg's own queued sends (their results are expected already), ahead of the sync
            queued.popleft()()
        pgconn.pipeline_sync()
        synced = True
        line.result_queue.append(None)  # the sync's result, as psycopg's `_enqueue_sync` expects it
        yield from send(pgconn)
    finally:
        yield from line._fetch_gen(flush=not synced)
