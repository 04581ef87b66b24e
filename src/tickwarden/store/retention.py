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
        # A lock reads the catalog afresh: a month another replica detached is no partition after it.
        self.conn.execute("LOCK TABLE runs, attempts, attempt_steps IN ACCESS SHARE MODE")
        names = self._month_tables(month)
        if not self._is_partition(names[-1]):
            return False  # another replica expired it
        self.conn.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(
            sql.SQL(", ").join(sql.Identifier(n) for n in names)))
        row = self._row("retention_month_keeps", {"lower": month.lower, "upper": month.upper, "now": now,
                                                  "default_days": default_days})
        return row is not None and not row["keeps"]

    def lock_ledger(self) -> None:
        """Take what detaching a month needs, before `detach_month` in the same transaction.

        The parents are locked first (ACCESS EXCLUSIVE, what detaching a partition takes
        anyway), in the order every ledger statement locks them, so the detach cannot
        deadlock with one. Every ledger statement queues behind a waiting ACCESS EXCLUSIVE,
        so the wait is short (`retention_lock_detach`): behind a long reader the month is
        left to a later pass rather than the ledger held up.
        """
        self._rows("retention_lock_detach")
        self.conn.execute("LOCK TABLE runs, attempts, attempt_steps IN ACCESS EXCLUSIVE MODE")

    def detach_month(self, month: LedgerMonth) -> bool:
        """Take a month the caller found droppable out of the ledger; True when this call did.

        In a transaction of its own, after the decision's, once `lock_ledger` holds the
        parents. Between the decision and the detach nothing writes a month past every
        retention: only kept rows are ever updated, and they kept it; a run awaiting an
        outcome is checked again under the lock all the same. The month's tables become
        standalone, still referencing each other but no longer tenants or workflows: a
        foreign key's triggers live on the table it references too, and dropping the month
        with them would hold those tables (ACCESS EXCLUSIVE) through the drop's long commit.
        Here they are held as long as the ledger is, for a catalog change and a commit that
        removes no file. The outcomes of the month's attempts that the poller has not
        claimed yet leave its queue in the same transaction, and so would any queue row of
        an attempt of the month (none is queued in a month without open runs).
        """
        names = self._month_tables(month)
        if not self._is_partition(names[-1]):
            return False  # another replica expired it
        open_runs = self.conn.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE finished_at IS NULL)")  # open: runs_open_deadline_idx
            .format(sql.Identifier(names[-1]))).fetchone()
        if open_runs is None or open_runs[0]:
            return False
        for name in names:
            parent = name.removesuffix(f"_{month.suffix}")
            self.conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
                sql.Identifier(parent), sql.Identifier(name)))
        for row in self._rows("retention_outside_keys", {"tables": names}):
            self.conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                sql.Identifier(row["table_name"]), sql.Identifier(row["constraint_name"])))
        self._execute("retention_forget_month_outcomes", {"lower": month.lower, "upper": month.upper})
        return True

    def detached_months(self) -> list[str]:
        """Suffixes of months taken out of the ledger whose tables are still there, oldest first."""
        return [row["suffix"] for row in self._rows("retention_detached_months")]

    def drop_detached(self, suffix: str) -> bool:
        """Drop the tables of a month taken out of the ledger; True when this call dropped any.

        In a transaction of its own, which locks nothing of the ledger but those tables, so
        the commit's removal of their files holds up no reader or writer. Replicas (and a
        pass finding what a crashed one left) serialize on the partitions' advisory lock,
        and only tables that are no partition are dropped: a table is dropped once, and
        never a live month.
        """
        self._rows("retention_lock_partitions")
        names = [n for n in self._month_tables_of(suffix) if self._is_standalone(n)]
        if names:
            self.conn.execute(sql.SQL("DROP TABLE {}").format(sql.SQL(", ").join(sql.Identifier(n) for n in names)))
        return bool(names)

    @staticmethod
    def _month_tables_of(suffix: str) -> list[str]:
        return [f"{table}_{suffix}" for table in ("attempt_steps", "attempts", "runs")]

    @classmethod
    def _month_tables(cls, month: LedgerMonth) -> list[str]:
        return cls._month_tables_of(month.suffix)

    def _is_partition(self, name: str) -> bool:
        row = self._row("retention_table_kind", {"name": name})
        return row is not None and bool(row["partition"])

    def _is_standalone(self, name: str) -> bool:
        row = self._row("retention_table_kind", {"name": name})
        return row is not None and not row["partition"]
