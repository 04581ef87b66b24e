"""Erasure: the catalog's tenant tables and text columns, and the statements over them.

Table and column names come only from the catalog and reach SQL as identifiers,
never as values a caller supplied; the per-table statements are templates among
the named blocks, filled in with `psycopg.sql`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from tickwarden.models import ErasureAudit, User, from_row
from tickwarden.store.base import StoreBase
from tickwarden.store.queries import queries


@dataclass(frozen=True)
class TextColumns:
    """The free-text columns of one table, with their types (text or json)."""

    table: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    tenant_column: str | None = None  # what says which tenant a row belongs to


@dataclass(frozen=True)
class Mention:
    """One row that mentions a needle: where it is and the values of the scanned columns."""

    row_ref: str
    tenant_id: int | None
    values: dict[str, Any]


class ErasureRepository(StoreBase):
    def _template(self, name: str, **parts: sql.Composable) -> sql.Composed:
        return sql.SQL(queries()[name]).format(**parts)

    def tenant_tables(self) -> dict[str, list[str]]:
        """Return each tenant table with the tables it references."""
        return {row["table_name"]: list(row["references"]) for row in self._rows("erasure_tenant_tables")}

    def count_tenant_rows(self, table: str, tenant_id: int) -> int:
        statement = self._template("erasure_count_tenant_rows", table=sql.Identifier(table))
        row = self.conn.execute(statement, {"tenant_id": tenant_id}).fetchone()
        return int(row[0]) if row else 0

    def delete_tenant_rows(self, table: str, tenant_id: int) -> int:
        statement = self._template("erasure_delete_tenant_rows", table=sql.Identifier(table))
        return self.conn.execute(statement, {"tenant_id": tenant_id}).rowcount

    def delete_tenant(self, tenant_id: int) -> int:
        return self._execute("erasure_delete_tenant", {"tenant_id": tenant_id})

    def text_columns(self) -> list[TextColumns]:
        return [TextColumns(row["table_name"], tuple(row["columns"]), tuple(row["types"]), row["tenant_column"])
                for row in self._rows("erasure_text_columns")]

    def find_mentions(
        self, target: TextColumns, address: str, names: Sequence[str], tenant_ids: Sequence[int]
    ) -> list[Mention]:
        """Return (locked) rows that mention the address, or a name in a row of one of `tenant_ids`.

        Rows of a table without tenants are searched for the names too.
        """
        def tests(needles: Sequence[str]) -> sql.Composable:
            return sql.SQL(" OR ").join(
                sql.SQL("strpos(lower({}::text), {}) > 0").format(sql.Identifier(c), sql.Literal(n.lower()))
                for c in target.columns for n in needles)

        match = tests([address])
        if names:
            scope: sql.Composable = sql.SQL("true")
            if target.tenant_column:
                scope = sql.SQL("{} = ANY({})").format(sql.Identifier(target.tenant_column),
                                                      sql.Literal(list(tenant_ids)))
            match = sql.SQL("({}) OR ({} AND ({}))").format(match, scope, tests(names))
        tenant = sql.Identifier(target.tenant_column) if target.tenant_column else sql.SQL("NULL::bigint")
        statement = self._template(
            "erasure_find_mentions", table=sql.Identifier(target.table), tenant=tenant,
            columns=sql.SQL(", ").join(sql.Identifier(c) for c in target.columns), match=match)
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(statement)
            return [Mention(row.pop("row_ref"), row.pop("row_tenant"), row) for row in cur.fetchall()]

    def rewrite_row(self, target: TextColumns, row_ref: str, values: dict[str, Any]) -> None:
        kinds = dict(zip(target.columns, target.types, strict=True))
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = {}").format(sql.Identifier(column), sql.Placeholder(f"v{i}"))
            for i, column in enumerate(values))
        params: dict[str, Any] = {"row_ref": row_ref}
        for i, (column, value) in enumerate(values.items()):
            params[f"v{i}"] = Jsonb(value) if kinds[column] in ("jsonb", "json") and value is not None else value
        statement = self._template("erasure_rewrite_row", table=sql.Identifier(target.table), assignments=assignments)
        self.conn.execute(statement, params)

    def find_users(self, email: str) -> list[User]:
        return [from_row(User, row) for row in self._rows("erasure_find_users", {"email": email})]

    def anonymise_users(self, email: str) -> int:
        return self._execute("erasure_anonymise_users", {"email": email})

    def record_audit(self, *, kind: str, target: str, actor: str, at: datetime,
                             counts: dict[str, int]) -> ErasureAudit:
        row = self._row("erasure_record_audit", {"kind": kind, "target": target, "actor": actor, "at": at,
                                                 "counts": Jsonb(counts)})
        assert row is not None
        return from_row(ErasureAudit, row)

    def list_audits(self, limit: int = 100) -> list[ErasureAudit]:
        return [from_row(ErasureAudit, row) for row in self._rows("erasure_list_audits", {"limit": limit})]
