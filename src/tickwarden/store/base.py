"""The one place that turns query names into executed statements."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.pq import ExecStatus
from psycopg.rows import dict_row

from tickwarden.store.queries import queries

TUPLES_OK = ExecStatus.TUPLES_OK


class StoreBase:
    """Runs named queries on one connection (inside the caller's transaction)."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn

    def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(queries()[name], params or {})
            # The result's status, not `cur.description`: that builds a Column object per
            # column on every call, a sizeable cost on the loops' hottest statements.
            result = cur.pgresult
            return cur.fetchall() if result is not None and result.status == TUPLES_OK else []

    def _row(self, name: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        rows = self._rows(name, params)
        return rows[0] if rows else None

    def _execute(self, name: str, params: dict[str, Any] | None = None) -> int:
        with self.conn.cursor() as cur:
            cur.execute(queries()[name], params or {})
            return cur.rowcount
