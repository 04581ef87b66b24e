"""Pipeline mode that raises a failed statement's own error (see `pipeline`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg


@contextlib.contextmanager
def pipeline(conn: psycopg.Connection) -> Iterator[None]:
    """`conn.pipeline()`, raising a failed statement's own error where psycopg raises `PipelineAborted` in its place.

    Leaving a pipeline sends a sync and reads the results left. When a statement failed,
    psycopg raises its error from what the last sends read, and then, if results were
    still to come (the error arrived while the commands after it were being sent: a busy
    machine), raises `PipelineAborted` for the skipped ones from the same exit, with the
    failure as its context only. A caller that acts on the failure (the ticker fires a
    pass again over a unique violation; a deadlock is retried) must see it whatever the
    timing, so the failure is raised.
    """
    try:
        with conn.pipeline():
            yield
    except psycopg.errors.PipelineAborted as exc:
        failure = exc.__context__
        if isinstance(failure, psycopg.Error) and not isinstance(failure, psycopg.errors.PipelineAborted):
            raise failure from None
        raise
