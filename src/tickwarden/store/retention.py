"""Retention: per-tenant overrides, the sweeper's bounded batches, and its counters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql

from tickwarden.models import RetentionPolicy, from_row
from tickwarden.store.base import StoreBase

LEDGER_QUERIES = {
    "logs": "retention_expire_logs",
    "payloads": "retention_expire_payloads",
    "metadata": "retention_expire_metadata",
}


@dataclass(frozen=True)
class LedgerMonth:
    """One month partition of the ledger: its suffix (pYYYYMM), UTC bounds and estimated rows."""

    suffix: str
    lower: datetime
    upper: datetime
    estimated_rows: int


@dataclass(frozen=True)
class LedgerSweep:
    """One batch of one ledger class: rows expired, workflows advanced, and whether more is waiting."""

    expired: int
    workflows: int
    more: bool


class RetentionRepository(StoreBase):
    def set_policy(self, tenant_id: int, days: dict[str, int | None], now: datetime) -> RetentionPolicy:
        params: dict[str, Any] = {f"{k}_days": days.get(k) for k in ("metadata", "logs", "payloads", "outbox", "alerts")}
        row = self._row("retention_policy_upsert", {**params, "tenant_id": tenant_id, "now": now})
        assert row is not None
        return from_row(RetentionPolicy, row)

    def get_policy(self, tenant_id: int) -> RetentionPolicy | None:
        row = self._row("retention_policy_get", {"tenant_id": tenant_id})
        return from_row(RetentionPolicy, row) if row else None

    def ensure_marks(self, now: datetime) -> int:
        return self._execute("retention_ensure_marks", {"now": now})

    def expire_ledger(
        self, klass: str, now: datetime, default_days: int, *, workflows: int, runs: int
    ) -> LedgerSweep:
        row = self._row(LEDGER_QUERIES[klass], {"now": now, "default_days": default_days,
                                                "workflows": workflows, "runs": runs})
        assert row is not None
        return LedgerSweep(expired=int(row["expired"]), workflows=int(row["workflows"]),
                           more=row["due"] >= workflows or row["full_workflows"] > 0)

    def expire_outbox(self, now: datetime, default_days: int, limit: int) -> int:
        row = self._row("retention_expire_outbox", {"now": now, "default_days": default_days, "limit": limit})
        return int(row["expired"]) if row else 0

    def expire_alerts(self, now: datetime, default_days: int, limit: int) -> int:
        row = self._row("retention_expire_alerts", {"now": now, "default_days": default_days, "limit": limit})
        return int(row["expired"]) if row else 0

    def expire_platform_alerts(self, now: datetime, default_days: int, limit: int) -> int:
        row = self._row("retention_expire_platform_alerts", {"now": now, "default_days": default_days, "limit": limit})
        return int(row["expired"]) if row else 0

    def add_totals(self, now: datetime, expired: dict[str, int]) -> None:
        classes = [k for k, v in expired.items() if v]
        if classes:
            self._execute("retention_add_totals", {"now": now, "classes": classes,
                                                   "rows": [expired[k] for k in classes]})

    def totals(self) -> dict[str, int]:
        return {row["class"]: int(row["rows"]) for row in self._rows("retention_totals")}

    def ensure_partition(self, at: datetime) -> bool:
        row = self._row("retention_ensure_partition", {"at": at})
        return bool(row and row["created"])

    def ledger_months(self) -> list[LedgerMonth]:
        return [LedgerMonth(r["suffix"], r["lower"], r["upper"], int(r["estimated_rows"]))
                for r in self._rows("retention_ledger_partitions")]

    def shortest_metadata_days(self, default_days: int) -> int:
        row = self._row("retention_shortest_metadata_days", {"default_days": default_days})
        return int(row["days"]) if row and row["days"] is not None else default_days

    def month_droppable(self, month: LedgerMonth, now: datetime, default_days: int) -> bool:
        """Whether retention keeps nothing in a month of the ledger.

        In the caller's transaction, which must do nothing else: the month's tables are
        locked against writers (SHARE) while it decides, so the answer is about a month
        nobody is writing to; reads of the ledger go on.
        """
        self._rows("retention_lock_partitions")
        # A lock reads the catalog afresh: a month another replica dropped is gone after it.
        self.conn.execute("LOCK TABLE runs, attempts, attempt_steps IN ACCESS SHARE MODE")
        names = self._month_tables(month)
        if not self._exists(names[-1]):
            return False  # another replica dropped it
        self.conn.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(
            sql.SQL(", ").join(sql.Identifier(n) for n in names)))
        row = self._row("retention_month_keeps", {"lower": month.lower, "upper": month.upper, "now": now,
                                                  "default_days": default_days})
        return row is not None and not row["keeps"]

    def lock_ledger(self) -> None:
        """Take what dropping a month needs, before `drop_month` in the same transaction.

        The parents are locked first (ACCESS EXCLUSIVE, what dropping a partition takes
        anyway), in the order every ledger statement locks them, so the drop cannot
        deadlock with one; the lock waits at most `lock_timeout`.
        """
        self._rows("retention_lock_partitions")
        self.conn.execute("LOCK TABLE runs, attempts, attempt_steps IN ACCESS EXCLUSIVE MODE")

    def drop_month(self, month: LedgerMonth) -> bool:
        """Drop a month the caller found droppable; True when this call dropped it.

        In a transaction of its own, after the decision's, once `lock_ledger` holds the
        parents. Between the decision and the drop nothing writes a month
        past every retention: only kept rows are ever updated, and they kept it; a run
        awaiting an outcome is checked again under the lock all the same.
        """
        names = self._month_tables(month)
        if not self._exists(names[-1]):
            return False  # another replica dropped it
        open_runs = self.conn.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE status IN ('queued', 'running', 'pending_retry'))")
            .format(sql.Identifier(names[-1]))).fetchone()
        if open_runs is None or open_runs[0]:
            return False
        self.conn.execute(sql.SQL("DROP TABLE {}").format(sql.SQL(", ").join(sql.Identifier(n) for n in names)))
        return True

    @staticmethod
    def _month_tables(month: LedgerMonth) -> list[str]:
        return [f"{table}_{month.suffix}" for table in ("attempt_steps", "attempts", "runs")]

    def _exists(self, name: str) -> bool:
        found = self.conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
        return found is not None and found[0] is not None
