"""The one place that turns query names into executed statements."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from tickwarden.store.queries import queries


class StoreBase:
    """Runs named queries on one connection (inside the caller's transaction)."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn

    def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(queries()[name], params or {})
            return cur.fetchall() if cur.description else []

    def _row(self, name: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        rows = self._rows(name, params)
        return rows[0] if rows else None

    def _execute(self, name: str, params: dict[str, Any] | None = None) -> int:
        with self.conn.cursor() as cur:
            cur.execute(queries()[name], params or {})
            return cur.rowcount
