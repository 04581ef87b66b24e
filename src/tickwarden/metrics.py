"""Operations: Prometheus metrics read from the database, and stalled-loop detection.

Every figure is read from the database at scrape time, so any replica answers for
the whole fleet and a restart loses nothing. Loops are watched through
`loop_heartbeats`: each replica records every pass of every loop with when it
intends to run next. A loop has stopped running anywhere when its newest
heartbeat, across all replicas, is overdue:

    overdue  ⇔  now > next_pass_at + grace,   grace = max(60 s, 2 × (next_pass_at − last_pass_at))

(without a next_pass_at, the expected interval is taken as 60 s), so a loop that
runs every 30 s is reported after 90 s of silence, and one that said it would sleep
for an hour is given its hour and two more.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tickwarden.clock import Clock
from tickwarden.db import Database
from tickwarden.models import Heartbeat
from tickwarden.retention import CLASSES as RETENTION_CLASSES
from tickwarden.store.api import OperationsSnapshot

DEFAULT_INTERVAL = timedelta(seconds=60)
MIN_GRACE = timedelta(seconds=60)
RUN_STATUSES = ("queued", "running", "pending_retry", "succeeded", "failed", "missed", "cancelled")
OUTBOX_WAITING = ("pending", "sending", "failed")


@dataclass(frozen=True)
class LoopStatus:
    """The newest pass of one loop across every replica, and whether it is overdue."""

    loop: str
    replicas: int
    replica_id: str
    last_pass_at: datetime
    next_pass_at: datetime | None
    overdue_at: datetime
    age_seconds: float
    stalled: bool
    last_error: str | None


def loop_statuses(heartbeats: Iterable[Heartbeat], now: datetime) -> list[LoopStatus]:
    """Summarise heartbeats per loop: the newest pass, its deadline, stalled or not."""
    by_loop: dict[str, list[Heartbeat]] = {}
    for beat in heartbeats:
        by_loop.setdefault(beat.loop, []).append(beat)
    statuses = []
    for loop, beats in sorted(by_loop.items()):
        newest = max(beats, key=lambda b: b.last_pass_at)
        expected = DEFAULT_INTERVAL
        if newest.next_pass_at is not None and newest.next_pass_at > newest.last_pass_at:
            expected = newest.next_pass_at - newest.last_pass_at
        due = newest.next_pass_at or newest.last_pass_at + expected
        overdue_at = max(due, newest.last_pass_at) + max(MIN_GRACE, 2 * expected)
        statuses.append(LoopStatus(
            loop=loop, replicas=len(beats), replica_id=newest.replica_id, last_pass_at=newest.last_pass_at,
            next_pass_at=newest.next_pass_at, overdue_at=overdue_at,
            age_seconds=max(0.0, (now - newest.last_pass_at).total_seconds()), stalled=now > overdue_at,
            last_error=newest.last_error,
        ))
    return statuses


def read_snapshot(db: Database) -> OperationsSnapshot:
    """Read every figure in one transaction, as the platform."""
    with db.transaction() as store:
        store.enter_tenant_context(None, platform=True)
        return store.api_operations_snapshot()


class TickwardenCollector(Collector):
    """Reads the database on every scrape and yields tickwarden's gauges."""

    def __init__(self, db: Database, clock: Clock):
        self.db, self.clock = db, clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock.now()
        snap = read_snapshot(self.db)
        runs = GaugeMetricFamily("tickwarden_runs", "Runs in the ledger by status (one per tick or manual run).",
                                 labels=["status"])
        for status in RUN_STATUSES:
            runs.add_metric([status], snap.runs_by_status.get(status, 0))
        yield runs
        yield GaugeMetricFamily("tickwarden_retry_attempts",
                                "Attempts beyond the first of their run: retries launched.", value=snap.retries)
        alerts = GaugeMetricFamily("tickwarden_open_alerts", "Open alerts by severity.", labels=["severity"])
        for severity in ("warning", "critical"):
            alerts.add_metric([severity], snap.open_alerts.get(severity, 0))
        yield alerts
        lag = 0.0 if snap.oldest_unprocessed is None else max(0.0, (now - snap.oldest_unprocessed).total_seconds())
        yield GaugeMetricFamily("tickwarden_poll_lag_seconds",
                                "Age of the oldest finished attempt the outcome poller has not processed.", value=lag)
        outbox = GaugeMetricFamily("tickwarden_outbox_backlog", "Notifications waiting for delivery, by status.",
                                   labels=["status"])
        for status in OUTBOX_WAITING:
            outbox.add_metric([status], snap.outbox.get(status, 0))
        yield outbox
        last = GaugeMetricFamily("tickwarden_loop_last_pass_timestamp_seconds",
                                 "When each replica last completed a pass of each loop (Unix time).",
                                 labels=["loop", "replica"])
        for beat in snap.heartbeats:
            last.add_metric([beat.loop, beat.replica_id], beat.last_pass_at.timestamp())
        yield last
        statuses = loop_statuses(snap.heartbeats, now)
        age = GaugeMetricFamily("tickwarden_loop_last_pass_age_seconds",
                                "Seconds since the newest pass of each loop on any replica.", labels=["loop"])
        stalled = GaugeMetricFamily("tickwarden_loop_stalled",
                                    "1 when a loop has stopped running on every replica (overdue), else 0.",
                                    labels=["loop"])
        for status in statuses:
            age.add_metric([status.loop], status.age_seconds)
            stalled.add_metric([status.loop], 1 if status.stalled else 0)
        yield age
        yield stalled
        yield GaugeMetricFamily("tickwarden_loops_stalled", "How many loops have stopped running anywhere.",
                                value=sum(1 for s in statuses if s.stalled))
        yield retention_counter(self.db)


def retention_counter(db: Database) -> CounterMetricFamily:
    """Rows the retention sweeper expired per class, over the database's life (any replica answers)."""
    with db.transaction() as store:
        store.enter_tenant_context(None, platform=True)
        totals = store.retention_totals()
    expired = CounterMetricFamily("tickwarden_retention_expired_rows",
                                  "Rows expired by retention, per class (cleared or deleted).", labels=["class"])
    for klass in RETENTION_CLASSES:
        expired.add_metric([klass], totals.get(klass, 0))
    return expired


def registry_for(db: Database, clock: Clock) -> CollectorRegistry:
    """Return a registry holding only tickwarden's collector (one per app, never the global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TickwardenCollector(db, clock))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
