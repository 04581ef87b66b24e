"""Retention classes and the retention sweeper.

Five classes, each with a platform default that a tenant may override:

| class      | what                                                        | default  | expiring it        |
|------------|-------------------------------------------------------------|----------|--------------------|
| `metadata` | runs and attempts (statuses, times, categories, ids)        | 400 days | deletes the rows   |
| `logs`     | step logs, log tails and error text of runs and attempts    | 30 days  | clears the columns |
| `payloads` | step outputs and attempt outputs (customer data)            | 7 days   | clears the columns |
| `outbox`   | delivered (or given-up) notification deliveries             | 30 days  | deletes the rows   |
| `alerts`   | resolved alerts with their events and threads (and the      | 400 days | deletes the rows   |
|            | platform's own, past the platform default)                  |          |                    |

Invariants, whatever the retention:

- a workflow's runs from its newest success on are never touched (the consecutive
  failure count walks exactly those, and an open alert's runs are among them), nor
  is any run still waiting for an outcome (the deadline detector's);
- an open alert, its events and its deliveries are never touched;
- clearing a log or payload keeps the row and every id, so joins stay possible.

The ledger is partitioned by month (migration 0023). Each pass first makes sure the
partitions of this month and the next AHEAD_MONTHS exist (created under an advisory
lock inside `tickwarden_ledger_partition`, so replicas never collide), then drops every
month that retention keeps nothing of: a month goes as a whole, without reading or
deleting its rows, once every run in it is past its tenant's metadata retention, older
than its workflow's newest success, and finished. A month that still holds a kept run
(a tenant with a longer retention, a workflow that has not succeeded since) is left to
the row-wise metadata sweep below, which deletes exactly the runs it may and keeps the
rest; the month is dropped on a later pass once nothing in it is kept any more. The
decision holds the month's tables against writers (SHARE). Expiring the month is then
two transactions. The first detaches its three tables from the ledger: it locks the
parent tables first (as every ledger statement does, so the two cannot deadlock), and
since every ledger statement queues behind that lock, waits for it at most half a
second (a month that cannot be detached now is detached later). The second drops the
standalone tables, holding nothing of the ledger while its commit removes their files.
Tables detached but not dropped (the process died in between) are recognised in the
catalog, by their names and by being no partition, and dropped by the next pass; replicas
serialize on an advisory lock, so each is dropped once. Rows counted for a dropped
month are the statistics' estimate (counting them exactly would read the month the drop avoids reading).

The sweeper is replica-safe: ledger classes go workflow by workflow through a per-
workflow mark (`retention_marks`) locked with SKIP LOCKED, so replicas take disjoint
workflows and a pass never rescans what it already expired; outbox rows and alerts
are claimed with SKIP LOCKED. Every batch is its own short transaction, bounded in
workflows × runs or rows, so no lock is held long and no single commit is large.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import psycopg
from pydantic import BaseModel, ConfigDict, Field

from tickwarden.db import Database
from tickwarden.models import RetentionPolicy
from tickwarden.retention_days import CLASSES, DEFAULT_DAYS, MAX_DAYS, MIN_DAYS
from tickwarden.store import Store

log = logging.getLogger(__name__)

INTERVAL = timedelta(minutes=10)
# Month partitions of the ledger exist this far ahead of the current month.
AHEAD_MONTHS = 2
WORKFLOWS_PER_BATCH = 100
RUNS_PER_WORKFLOW = 200
ROWS_PER_BATCH = 5000
# A pass stops after this many batches and comes back at once, so one pass never
# monopolises a connection however large the backlog.
MAX_BATCHES = 20


class RetentionSpec(BaseModel):
    """Per-tenant overrides, in days; an omitted class keeps the platform default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metadata_days: int | None = Field(default=None, ge=MIN_DAYS["metadata"], le=MAX_DAYS)
    logs_days: int | None = Field(default=None, ge=MIN_DAYS["logs"], le=MAX_DAYS)
    payloads_days: int | None = Field(default=None, ge=MIN_DAYS["payloads"], le=MAX_DAYS)
    outbox_days: int | None = Field(default=None, ge=MIN_DAYS["outbox"], le=MAX_DAYS)
    alerts_days: int | None = Field(default=None, ge=MIN_DAYS["alerts"], le=MAX_DAYS)

    def days(self) -> dict[str, int | None]:
        return {klass: getattr(self, f"{klass}_days") for klass in CLASSES}


def set_tenant_retention(store: Store, tenant_id: int, spec: RetentionSpec, now: datetime) -> RetentionPolicy:
    """Replace a tenant's overrides: the one write path of workflow files, the API and the CLI."""
    return store.retention.set_policy(tenant_id, spec.days(), now)


def effective_days(policy: RetentionPolicy | None) -> dict[str, int]:
    """Return the days each class is kept for a tenant with these overrides."""
    return {klass: (getattr(policy, f"{klass}_days", None) if policy else None) or DEFAULT_DAYS[klass]
            for klass in CLASSES}


class MonthsExpired(NamedTuple):
    """Months taken out of the ledger by one call, their estimated rows, and leftovers it dropped."""

    dropped: list[str]
    rows: int
    leftovers: list[str]


@dataclass(frozen=True)
class RetentionPass:
    """What one pass expired, per class, and whether a backlog remains."""

    expired: dict[str, int] = field(default_factory=dict)
    more: bool = False
    months_created: int = 0
    months_dropped: list[str] = field(default_factory=list)
    leftovers_dropped: list[str] = field(default_factory=list)


class RetentionSweeper:
    """Expires each class past its horizon, in bounded batches."""

    name = "retention"

    def __init__(
        self,
        db: Database,
        *,
        interval: timedelta = INTERVAL,
        defaults: dict[str, int] | None = None,
        workflows_per_batch: int = WORKFLOWS_PER_BATCH,
        runs_per_workflow: int = RUNS_PER_WORKFLOW,
        rows_per_batch: int = ROWS_PER_BATCH,
        max_batches: int = MAX_BATCHES,
    ):
        self.db = db
        self.interval = interval
        self.defaults = {**DEFAULT_DAYS, **(defaults or {})}
        self.workflows_per_batch = workflows_per_batch
        self.runs_per_workflow = runs_per_workflow
        self.rows_per_batch = rows_per_batch
        self.max_batches = max_batches
        self.last_drop: dict[str, float] = {}

    def run_once(self, now: datetime) -> datetime:
        """Sweep at `now`; come back at once while a backlog remains."""
        return now if self.sweep(now).more else now + self.interval

    def sweep(self, now: datetime) -> RetentionPass:
        """Do one pass: each class in turn, batch by batch, each batch its own transaction.

        Metadata goes first: a run it deletes is then not first rewritten (and written
        to the WAL) by the column-clearing classes for nothing.
        """
        expired = dict.fromkeys(CLASSES, 0)
        more = False
        created = self.create_months(now)
        months = self.drop_months(now)
        expired["metadata"] = months.rows
        with self.db.transaction() as store:
            store.retention.ensure_marks(now)
        for klass in ("metadata", "logs", "payloads"):
            for _ in range(self.max_batches):
                with self.db.transaction() as store:
                    batch = store.retention.expire_ledger(
                        klass, now, self.defaults[klass],
                        workflows=self.workflows_per_batch, runs=self.runs_per_workflow)
                    store.retention.add_totals(now, {klass: batch.expired})
                expired[klass] += batch.expired
                if not batch.more:
                    break
            else:
                more = True
        for klass in ("outbox", "alerts"):
            for _ in range(self.max_batches):
                with self.db.transaction() as store:
                    if klass == "outbox":
                        count = store.retention.expire_outbox(now, self.defaults[klass], self.rows_per_batch)
                    else:  # the tenants' alert history, then the platform's own (its default, no tenant)
                        count = store.retention.expire_alerts(now, self.defaults[klass], self.rows_per_batch)
                        count += store.retention.expire_platform_alerts(now, self.defaults[klass],
                                                                        self.rows_per_batch)
                    store.retention.add_totals(now, {klass: count})
                expired[klass] += count
                if count < self.rows_per_batch:
                    break
            else:
                more = True
        if any(expired.values()):
            log.info("retention expired %s", ", ".join(f"{k}={v}" for k, v in expired.items() if v))
        return RetentionPass(expired=expired, more=more, months_created=created,
                             months_dropped=months.dropped, leftovers_dropped=months.leftovers)

    def create_months(self, now: datetime) -> int:
        """Create the ledger's partitions for this month and the next AHEAD_MONTHS; return how many were new."""
        created = 0
        for at in month_starts(now, AHEAD_MONTHS):
            with self.db.transaction() as store:
                created += store.retention.ensure_partition(at)
        return created

    def drop_months(self, now: datetime) -> MonthsExpired:
        """Expire each month retention keeps nothing of, and drop what earlier passes left detached.

        Each month goes in two transactions: the detach (which holds the whole ledger,
        briefly) and the drop of its now standalone tables (which holds nothing of the
        ledger, however long the removal of their files takes). Tables a pass detached but
        never dropped (it died in between) are found in the catalog and dropped first.
        Where the time of the last call went is left in `last_drop` (milliseconds): the
        decision (listing the months, then each month's probes under its SHARE locks), the
        wait for the parents' locks, the detach with its commit (the ledger is held from
        the wait on), the DROP, and its commit (a commit that drops files always waits for
        its WAL to reach the disk).
        """
        default_days = self.defaults["metadata"]
        phases = dict.fromkeys(("decide_ms", "lock_ms", "detach_ms", "drop_ms", "commit_ms"), 0.0)
        self.last_drop = phases
        with self.db.transaction() as store:
            leftovers = store.retention.detached_months()
        leftovers = [suffix for suffix in leftovers if self._drop_detached(suffix, phases)]
        t0 = time.perf_counter()
        with self.db.transaction() as store:
            months = store.retention.ledger_months()
            horizon = now - timedelta(days=store.retention.shortest_metadata_days(default_days))
        phases["decide_ms"] += _ms_since(t0)
        dropped: list[str] = []
        rows = 0
        for month in months:
            if month.upper > horizon:
                break
            try:
                t0 = time.perf_counter()
                with self.db.transaction() as store:
                    droppable = store.retention.month_droppable(month, now, default_days)
                phases["decide_ms"] += _ms_since(t0)
                if not droppable:
                    continue
                t0 = time.perf_counter()
                with self.db.transaction() as store:
                    try:
                        store.retention.lock_ledger()
                    finally:  # a wait that timed out held up the ledger as long
                        t1 = time.perf_counter()
                        phases["lock_ms"] += (t1 - t0) * 1000
                    gone = store.retention.detach_month(month)
                    if gone:
                        store.retention.add_totals(now, {"metadata": month.estimated_rows})
                phases["detach_ms"] += _ms_since(t1)
            except psycopg.errors.LockNotAvailable:
                log.info("retention: ledger month %s is busy; it is expired on a later pass", month.suffix)
                continue
            if gone:
                dropped.append(month.suffix)
                rows += month.estimated_rows
                log.info("retention expired ledger month %s (about %d rows)", month.suffix, month.estimated_rows)
                self._drop_detached(month.suffix, phases)
        if dropped or leftovers:
            log.info("retention: expiring months took %s", ", ".join(f"{k[:-3]} {v:.0f} ms" for k, v in phases.items()))
        return MonthsExpired(dropped, rows, leftovers)

    def _drop_detached(self, suffix: str, phases: dict[str, float]) -> bool:
        """Drop a detached month's tables; False when another pass did, or they are busy (a later pass does)."""
        try:
            t0 = time.perf_counter()
            with self.db.transaction() as store:
                gone = store.retention.drop_detached(suffix)
                t1 = time.perf_counter()
                phases["drop_ms"] += (t1 - t0) * 1000
            phases["commit_ms"] += _ms_since(t1)
        except psycopg.errors.LockNotAvailable:
            log.info("retention: detached ledger month %s is busy; it is dropped on a later pass", suffix)
            return False
        return gone


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def month_starts(now: datetime, ahead: int) -> list[datetime]:
    """The first instants (UTC) of the month holding `now` and of the `ahead` months after it."""
    utc = now.astimezone(UTC)
    starts = []
    for k in range(ahead + 1):
        index = utc.year * 12 + utc.month - 1 + k
        starts.append(datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC))
    return starts
