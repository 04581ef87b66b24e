"""Operations: Prometheus metrics of the fleet (read from the database) and of this process.

Fleet gauges are read from the database at scrape time, so any replica answers for
the whole fleet and a restart loses nothing; each is one cheap statement (a partial
index or one probe per tenant), never a count over the whole ledger. Loops are
watched through `loop_heartbeats`: each replica records every pass of every loop
with when it intends to run next. A loop has stopped running anywhere when its
newest heartbeat, across all replicas, is overdue:

    overdue  ⇔  now > next_pass_at + grace,   grace = max(60 s, 2 × (next_pass_at − last_pass_at))

(without a next_pass_at, the expected interval is taken as 60 s), so a loop that
runs every 30 s is reported after 90 s of silence, and one that said it would sleep
for an hour is given its hour and two more.

Work is counted by the processes that do it, in one registry per process
(`ProcessMetrics`): a worker counts the attempts it finished and the verdicts they
gave, the poller the retries it launched, the deadline detector the runs it
declared missed, the reaper the leases it expired, the notifier each delivery. A
call sits after the transaction that wrote the change, so only what committed is
counted. Every process series carries `replica`, a stable name (`TICKWARDEN_REPLICA`,
default the host name) that survives restarts; fleet totals are
`sum without (replica)`.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tickwarden import __version__
from tickwarden.clock import Clock
from tickwarden.db import Database
from tickwarden.models import Heartbeat
from tickwarden.retention_days import CLASSES as RETENTION_CLASSES
from tickwarden.store.api import OperationsSnapshot
from tickwarden.store.outbox import CHANNEL_KINDS

if TYPE_CHECKING:
    from tickwarden.models import Attempt, FinishedAttempt
    from tickwarden.retries import RetryOutcome
    from tickwarden.store.outbox import DeliveryContext

DEFAULT_INTERVAL = timedelta(seconds=60)
MIN_GRACE = timedelta(seconds=60)
IN_FLIGHT = ("queued", "running", "pending_retry")
OUTBOX_WAITING = ("pending", "sending", "failed", "held")  # held: by a maintenance window, sent when it ends
REPLICA_ENV = "TICKWARDEN_REPLICA"
TERMINAL = ("succeeded", "failed", "missed", "cancelled")
ATTEMPT_STATUSES = ("succeeded", "failed", "lost")
NOTIFICATION_OUTCOMES = ("sent", "retried", "dead", "disabled_channels")
# From a one-second job to a nightly pipeline that runs for hours.
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, float("inf"))
# A healthy start is within seconds of its tick; minutes mean the workers are short.
LAG_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, float("inf"))
# A delivery waits for its thread's earlier events and for back-off after provider errors.
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, float("inf"))
# Ticks remembered between lease and finish; attempts released without finishing age out.
MAX_REMEMBERED = 4096
_GENERATED_ID = re.compile(r"^(?P<stable>.+):\d+:[0-9a-f]{6}$")


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
        store.api.enter_tenant_context(None, platform=True)
        return store.api.operations_snapshot()


class TickwardenCollector(Collector):
    """Reads the database on every scrape and yields tickwarden's gauges."""

    def __init__(self, db: Database, clock: Clock):
        self.db, self.clock = db, clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock.now()
        snap = read_snapshot(self.db)
        runs = GaugeMetricFamily("tickwarden_runs_in_flight", "Runs waiting for a verdict, by status.",
                                 labels=["status"])
        for status in IN_FLIGHT:
            runs.add_metric([status], snap.runs_in_flight.get(status, 0))
        yield runs
        success = GaugeMetricFamily(
            "tickwarden_tenant_last_success_timestamp_seconds",
            "When each tenant's newest successful run finished (Unix time); tenants without one are absent.",
            labels=["tenant_id"])
        for tenant_id, at in snap.tenant_last_success.items():
            if at is not None:
                success.add_metric([str(tenant_id)], at.timestamp())
        yield success
        alerts = GaugeMetricFamily("tickwarden_open_alerts", "Open alerts by severity.", labels=["severity"])
        for severity in ("warning", "critical"):
            alerts.add_metric([severity], snap.open_alerts.get(severity, 0))
        yield alerts
        lag = 0.0 if snap.oldest_unprocessed is None else max(0.0, (now - snap.oldest_unprocessed).total_seconds())
        yield GaugeMetricFamily("tickwarden_poll_lag_seconds",
                                "Age of the oldest finished attempt the outcome poller has not processed.", value=lag)
        outbox = GaugeMetricFamily("tickwarden_outbox_backlog", "Notifications waiting for delivery, by status (held: until a maintenance window ends).",
                                   labels=["status"])
        for status in OUTBOX_WAITING:
            outbox.add_metric([status], snap.outbox.get(status, 0))
        yield outbox
        last = GaugeMetricFamily("tickwarden_loop_last_pass_timestamp_seconds",
                                 "When each replica last completed a pass of each loop (Unix time).",
                                 labels=["loop", "replica"])
        # Several processes of one replica (or restarts of it) report under its stable name: the newest wins.
        newest: dict[tuple[str, str], float] = {}
        for beat in snap.heartbeats:
            key = (beat.loop, stable_replica(beat.replica_id))
            newest[key] = max(newest.get(key, 0.0), beat.last_pass_at.timestamp())
        for (loop, replica), at in sorted(newest.items()):
            last.add_metric([loop, replica], at)
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
        store.api.enter_tenant_context(None, platform=True)
        totals = store.retention.totals()
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
    """Render the fleet's gauges and this process's own metrics as one exposition."""
    return generate_latest(registry) + generate_latest(current().registry)


def serve_process_metrics(port: int, host: str = "127.0.0.1") -> None:
    """Expose this process's metrics on http://host:port/metrics (a worker has no API to serve them)."""
    start_http_server(port, addr=host, registry=current().registry)


def replica_label(environ: dict[str, str] | None = None) -> str:
    """Return this process's stable name: TICKWARDEN_REPLICA, or the host name."""
    value = (os.environ if environ is None else environ).get(REPLICA_ENV, "").strip()
    return value or socket.gethostname()


def stable_replica(replica_id: str) -> str:
    """Drop the pid and nonce a generated replica id ends with (`serve@host:123:ab12cd` → `serve@host`)."""
    match = _GENERATED_ID.match(replica_id)
    return match.group("stable") if match else replica_id


class ProcessMetrics:
    """The registry of one process: its work counters, latency histograms, process metrics, build_info."""

    def __init__(self, replica: str):
        self.replica = replica
        disable_created_metrics()  # `_created` series double every counter and no dashboard reads them
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        info = Gauge("tickwarden_build_info", "Always 1: the version and Python this replica runs.",
                     ["version", "python", "replica"], registry=self.registry)
        info.labels(__version__, platform.python_version(), replica).set(1)
        self.runs = Counter("tickwarden_runs", "Runs given their verdict by this replica, by status.",
                            ["status", "replica"], registry=self.registry)
        self.attempts = Counter("tickwarden_attempts", "Attempts finished by this replica (lost: reaped), by status.",
                                ["status", "replica"], registry=self.registry)
        self.retries = Counter("tickwarden_retries", "Retry attempts launched by this replica.",
                               ["replica"], registry=self.registry)
        self.notifications = Counter("tickwarden_notifications",
                                     "Deliveries tried by this replica, by channel kind and outcome.",
                                     ["kind", "outcome", "replica"], registry=self.registry)
        self.run_duration = Histogram("tickwarden_run_duration_seconds",
                                      "From a run's tick to its verdict (retries included), by verdict.",
                                      ["status", "replica"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.schedule_lag = Histogram("tickwarden_schedule_lag_seconds",
                                      "From a run's tick to the start of its first attempt.",
                                      ["replica"], buckets=LAG_BUCKETS, registry=self.registry)
        self.delivery_latency = Histogram("tickwarden_delivery_latency_seconds",
                                          "From an alert event to its delivery on a channel, by channel kind.",
                                          ["kind", "replica"], buckets=LATENCY_BUCKETS, registry=self.registry)
        # Every series exists from the start at zero, so rate() sees the first increment.
        for status in TERMINAL:
            self.runs.labels(status, replica)
            self.run_duration.labels(status, replica)
        for kind in CHANNEL_KINDS:
            self.delivery_latency.labels(kind, replica)
            for outcome in NOTIFICATION_OUTCOMES:
                self.notifications.labels(kind, outcome, replica)
        for status in ATTEMPT_STATUSES:
            self.attempts.labels(status, replica)
        self.retries.labels(replica)
        self.schedule_lag.labels(replica)
        # The worker's series, looked up once: a label look-up takes a lock and costs several
        # times the increment it leads to, and the worker makes four an attempt.
        self._attempts_by_status = {status: self.attempts.labels(status, replica) for status in ATTEMPT_STATUSES}
        self._runs_by_status = {status: self.runs.labels(status, replica) for status in TERMINAL}
        self._run_duration_by_status = {status: self.run_duration.labels(status, replica) for status in TERMINAL}
        self._schedule_lag = self.schedule_lag.labels(replica)
        # The control plane's series, likewise: the poller counts its retries at every pass with work.
        self._retries = self.retries.labels(replica)
        self._lost = self._attempts_by_status["lost"]
        self._notifications = {(kind, outcome): self.notifications.labels(kind, outcome, replica)
                               for kind in CHANNEL_KINDS for outcome in NOTIFICATION_OUTCOMES}
        self._delivery_latency = {kind: self.delivery_latency.labels(kind, replica) for kind in CHANNEL_KINDS}
        self._ticks: OrderedDict[int, datetime] = OrderedDict()
        self._lock = threading.Lock()

    # -- the worker ---------------------------------------------------------------

    def attempts_leased(self, leased: Sequence[tuple[Attempt, datetime]], now: datetime) -> list[Attempt]:
        """Observe the schedule lag of first attempts; remember each tick until the attempt finishes."""
        attempts = []
        with self._lock:
            for attempt, tick in leased:
                if attempt.number == 1:
                    self._schedule_lag.observe(max(0.0, (now - tick).total_seconds()))
                self._ticks[attempt.id] = tick
                while len(self._ticks) > MAX_REMEMBERED:
                    self._ticks.popitem(last=False)
                attempts.append(attempt)
        return attempts

    def attempt_finished(self, attempt: Attempt, status: str, finished: FinishedAttempt, now: datetime) -> None:
        """Count an attempt this worker recorded, and its run's verdict when it gave one."""
        with self._lock:
            tick = self._ticks.pop(attempt.id, None)
        if not finished.applied:  # recorded before (a second delivery): counted then
            return
        self._attempts_by_status[status].inc()
        if finished.run_status in TERMINAL:
            self._runs_by_status[finished.run_status].inc()
            if tick is not None:
                self._run_duration_by_status[finished.run_status].observe(max(0.0, (now - tick).total_seconds()))

    # -- the control plane's loops ------------------------------------------------

    def leases_expired(self, reaped: Iterable[FinishedAttempt]) -> None:
        """Count attempts the lease reaper declared lost, and the verdicts that gave."""
        for item in reaped:
            self._lost.inc()
            if item.run_status in TERMINAL:
                self._runs_by_status[item.run_status].inc()

    def retries_decided(self, outcome: RetryOutcome) -> None:
        """Count retries the retry engine launched, and runs it failed because retrying cannot help."""
        if outcome.launched:  # adding nothing changes no series (each exists from the start)
            self._retries.inc(len(outcome.launched))
        if outcome.failed:
            self._runs_by_status["failed"].inc(len(outcome.failed))

    def runs_closed(self, status: str, count: int = 1) -> None:
        """Count runs closed without an attempt's outcome: `missed` by the deadline detector, or `cancelled`."""
        if count:
            (self._runs_by_status.get(status) or self.runs.labels(status, self.replica)).inc(count)

    def notification_outcome(self, ctx: DeliveryContext, outcome: str | None, now: datetime) -> None:
        """Count one delivery's outcome; a sent one observes the latency from its event."""
        if outcome is None:  # deferred behind its channel's back-off, or taken over: nothing happened yet
            return
        kind = ctx.channel.kind
        counted = self._notifications.get((kind, outcome))
        (counted or self.notifications.labels(kind, outcome, self.replica)).inc()
        if outcome == "sent":
            latency = self._delivery_latency.get(kind) or self.delivery_latency.labels(kind, self.replica)
            latency.observe(max(0.0, (now - ctx.event_at).total_seconds()))


_current: ProcessMetrics | None = None
_current_lock = threading.Lock()


def current() -> ProcessMetrics:
    """Return this process's metrics, created on first use with the configured replica name."""
    global _current
    with _current_lock:
        if _current is None:
            _current = ProcessMetrics(replica_label())
        return _current
