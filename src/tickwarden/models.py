"""Rows as frozen dataclasses: what the rest of the code sees instead of cursors."""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tickwarden.cadence import CronSchedule, parse_schedule
from tickwarden.clock import ensure_utc

T = TypeVar("T")

RUN_TERMINAL = ("succeeded", "failed", "missed", "cancelled")


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@functools.cache
def _field_values(cls: type) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """What reads every field of `cls` from a row, in the class's order (KeyError when one is missing)."""
    names = [f.name for f in dataclasses.fields(cls)]
    if len(names) == 1:
        return lambda row: (row[names[0]],)
    return operator.itemgetter(*names)


@functools.cache
def _stored_names(cls: type) -> tuple[str, ...] | None:
    """The fields of `cls` in order when its `__init__` only stores them, else None.

    Such an instance is the one `cls(*values)` makes when its `__dict__` is set to the fields'
    values in field order (as `store.base.record_builder` builds one): equal in every field,
    repr and hash, and as frozen. A class whose `__init__` does more (a `__post_init__`, a field
    left out of `__init__`, an init-only variable, an `__init__` of its own that changes what it is
    given) or that has slots (no `__dict__`) is built by its `__init__`. Nothing marks an `__init__`
    written in the class body apart from the generated one, so the class's `__init__` is tried once,
    on a marker a field: it qualifies when it stored each marker, and nothing else, under its field.
    """
    fields = dataclasses.fields(cls)
    params = getattr(cls, "__dataclass_params__", None)
    if (params is None or not params.init or hasattr(cls, "__post_init__") or hasattr(cls, "__slots__")
            or any(not f.init for f in fields) or len(fields) != len(cls.__dataclass_fields__)):  # type: ignore[attr-defined]
        return None
    names = tuple(f.name for f in fields)
    markers = [object() for _ in names]
    try:
        probe = cls(*markers)
    except Exception:  # an __init__ of its own that reads what it is given
        return None
    stored = vars(probe)
    if list(stored) != list(names) or any(stored[n] is not m for n, m in zip(names, markers, strict=True)):
        return None
    return names


_new, _assign = object.__new__, object.__setattr__


def from_row(cls: type[T], row: dict[str, Any]) -> T:
    """Build a dataclass from a row mapping, ignoring columns it does not declare.

    A row with every field (the usual one) is read in one C call for the lot, instead of a
    dict of keyword arguments filtered column by column, and builds the instance without
    its `__init__` where that only stores the fields (`_stored_names`): a frozen dataclass's
    stores each through `object.__setattr__`, one call a field. The hottest rows (a leased
    attempt, a deadline watermark: some 15,000 of each a simulated day) are read as tuples
    and built by `store.base.record_builder` instead.
    """
    try:
        values = _field_values(cls)(row)
    except KeyError:  # a field left to its default
        names = _field_names(cls)
        return cls(**{k: v for k, v in row.items() if k in names})
    stored = _stored_names(cls)
    if stored is None:
        return cls(*values)
    made: T = _new(cls)
    _assign(made, "__dict__", dict(zip(stored, values, strict=False)))  # of one length: read by the same names
    return made


@dataclass(frozen=True)
class Tenant:
    id: int
    name: str
    display_name: str
    shadow: bool
    created_at: datetime


@dataclass(frozen=True)
class User:
    id: int
    tenant_id: int
    email: str
    display_name: str
    active: bool
    created_at: datetime


@dataclass(frozen=True)
class Environment:
    id: int
    tenant_id: int
    name: str
    python: str | None
    idle_timeout_seconds: int
    settings: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    runtime: str = "process"  # or `kubernetes`: a StatefulSet woken by tickwarden (environments/pods.py)
    pod: dict[str, Any] | None = None  # image, resources, volume (runtime kubernetes only)


@dataclass(frozen=True)
class Workflow:
    id: int
    tenant_id: int
    name: str
    description: str
    environment_id: int | None
    publisher_id: int | None
    recipe: dict[str, Any]
    timeout_seconds: int | None
    monitoring_enabled: bool
    policy_overrides: dict[str, Any]
    shadow: bool
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None = None
    expect_rows: bool = False
    keep_outputs: bool = False  # step outputs are stored only when the workflow asks
    kind: str = "managed"  # external: run by another scheduler, outcomes reported as check-ins


@dataclass(frozen=True)
class Schedule:
    id: int
    tenant_id: int
    workflow_id: int
    cron: str
    timezone: str
    status: str
    cadence_seconds: int
    starting_deadline_seconds: int
    version: int
    published_at: datetime | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Run:
    id: int
    tenant_id: int
    workflow_id: int
    scheduled_for: datetime
    manual: bool
    status: str
    recovered: bool
    retry_budget: int
    attempts_count: int
    deadline_at: datetime
    error_category: str | None
    error: str | None
    failed_step: str | None
    requested_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    rows: int | None = None
    cancelled_by: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in RUN_TERMINAL


@dataclass(frozen=True)
class Attempt:
    id: int
    tenant_id: int
    workflow_id: int
    run_id: int
    run_scheduled_for: datetime  # its run's tick: the ledger's partition key, naming the month it lives in
    number: int
    status: str
    worker_id: str | None
    lease_expires_at: datetime | None
    queued_at: datetime
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    retryable: bool | None
    error_category: str | None
    error: str | None
    failed_step: str | None
    log_tail: str | None
    outputs: dict[str, Any]


@dataclass(frozen=True)
class AttemptOutcome:
    """What a worker (or the lease reaper) reports when an attempt ends."""

    status: str  # succeeded | failed | lost
    error_category: str | None = None
    error: str | None = None
    failed_step: str | None = None
    retryable: bool = True
    log_tail: str | None = None
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    rows: int | None = None  # rows the steps reported committing; None: no step reported a count


@dataclass(frozen=True)
class FinishedAttempt:
    """The result of recording an outcome: whether it applied and where the run went."""

    applied: bool
    attempt_id: int
    run_id: int | None = None
    number: int | None = None
    run_status: str | None = None


@dataclass(frozen=True)
class Alert:
    id: int
    tenant_id: int
    workflow_id: int
    status: str
    first_severity: str
    severity: str
    owner: str
    failure_count: int
    cadence_seconds: int
    escalation_multiplier: float
    escalate_after: int
    escalate_at: datetime
    shadow: bool
    first_failure_at: datetime
    last_failure_at: datetime
    last_run_id: int | None
    last_error_category: str | None
    last_error: str | None
    failed_step: str | None
    opened_at: datetime
    escalated_at: datetime | None
    resolved_at: datetime | None
    resolved_by_run_id: int | None
    downtime_seconds: int | None
    acknowledged_at: datetime | None = None
    acknowledged_by: str | None = None
    snoozed_until: datetime | None = None
    manual_failures: int = 0
    reason: str = "consecutive_failures"  # the rule that opened it: consecutive_failures | failure_rate


@dataclass(frozen=True)
class AlertView:
    """An alert with the names a person reads."""

    alert: Alert
    tenant_name: str
    workflow_name: str


@dataclass(frozen=True)
class AlertEvent:
    id: int
    tenant_id: int
    alert_id: int
    kind: str
    at: datetime
    severity: str
    owner: str
    actor: str
    note: str | None
    data: dict[str, Any]
    internal: bool = False


@dataclass(frozen=True)
class Channel:
    """A notification channel; `tenant` is the tenant's name where a query joins it."""

    id: int
    tenant_id: int | None
    name: str
    kind: str
    audience: str
    config: dict[str, Any]
    secret_ref: str | None
    enabled: bool
    disabled_reason: str | None
    disabled_at: datetime | None
    created_at: datetime
    tenant: str | None = None
    severities: list[str] | None = None  # routing: None takes every severity
    events: list[str] | None = None  # routing: None takes every event kind that notifies

    @property
    def label(self) -> str:
        """The channel as people name it: `tenant/name`, or `platform/name` for the platform's own."""
        return f"{self.tenant or 'platform'}/{self.name}"


@dataclass(frozen=True)
class EnvironmentInstance:
    """A running (or stopped) environment process of one worker."""

    id: int
    tenant_id: int
    environment_id: int
    worker_id: str
    pid: int | None
    status: str
    started_at: datetime
    last_used_at: datetime
    stopped_at: datetime | None
    runs_served: int
    tenant: str | None = None
    environment: str | None = None
    python: str | None = None
    idle_timeout_seconds: int | None = None


@dataclass(frozen=True)
class Heartbeat:
    """One replica's record of one loop's latest pass."""

    replica_id: str
    loop: str
    last_pass_at: datetime
    last_duration_ms: float
    passes: int
    last_error: str | None
    next_pass_at: datetime | None


@dataclass(frozen=True)
class AttemptStep:
    """What one step of an attempt did."""

    attempt_id: int
    step: str
    position: int
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    log: str
    output: Any
    error: str | None
    tenant_id: int | None = None


@dataclass(frozen=True)
class SecretInfo:
    """A tenant secret as anyone but the run that uses it sees it: a name, never a value."""

    tenant_id: int
    name: str
    key_id: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class RetentionPolicy:
    """One tenant's retention overrides, in days; None keeps the platform default."""

    tenant_id: int
    metadata_days: int | None
    logs_days: int | None
    payloads_days: int | None
    outbox_days: int | None
    alerts_days: int | None
    updated_at: datetime


@dataclass(frozen=True)
class SealedSecret:
    """A tenant secret as stored: encrypted, bound to its tenant and name."""

    tenant_id: int
    name: str
    key_id: str
    ciphertext: bytes


@dataclass(frozen=True)
class ErasureAudit:
    """What one erasure removed, when and by whom: counts, never the erased values."""

    id: int
    kind: str
    target: str
    actor: str
    at: datetime
    counts: dict[str, Any]


# -- maintenance windows (the policy: tickwarden.maintenance) ---------------------------------------


@dataclass(frozen=True)
class Window:
    """One maintenance window as stored; `workflow` None means every workflow of the tenant."""

    id: int
    tenant_id: int
    tenant: str
    workflow_id: int | None
    workflow: str | None
    source: str
    starts_at: datetime | None
    ends_at: datetime | None
    cron: str | None
    timezone: str | None
    duration_seconds: int | None
    note: str | None
    created_by: str
    created_at: datetime

    @property
    def recurring(self) -> bool:
        return self.cron is not None

    @property
    def scope(self) -> str:
        return f"{self.tenant}/{self.workflow}" if self.workflow else f"{self.tenant} (every workflow)"

    def describe(self) -> str:
        """One line for tables and pages: when the window applies."""
        if self.recurring:
            return f"{self.cron} ({self.timezone}) for {_window_human(self.duration_seconds or 0)}"
        assert self.starts_at is not None and self.ends_at is not None
        return f"{_window_iso(self.starts_at)} – {_window_iso(self.ends_at)}"

    def span_at(self, instant: datetime) -> tuple[datetime, datetime] | None:
        """Return the occurrence [start, end) of this window that contains `instant`, if any."""
        instant = ensure_utc(instant)
        if not self.recurring:
            assert self.starts_at is not None and self.ends_at is not None
            return (self.starts_at, self.ends_at) if self.starts_at <= instant < self.ends_at else None
        duration = timedelta(seconds=self.duration_seconds or 0)
        # The only occurrence that can contain `instant` is the first fire strictly after
        # instant − duration; if that fire is not later than `instant`, it contains it.
        fire = self._schedule().next_after(instant - duration)
        if fire is not None and fire <= instant:
            return fire, fire + duration
        return None

    def next_start(self, after: datetime) -> datetime | None:
        """Return the first start of this window strictly after `after`, if any."""
        if not self.recurring:
            assert self.starts_at is not None
            return self.starts_at if self.starts_at > after else None
        return self._schedule().next_after(after)

    def _schedule(self) -> CronSchedule:
        assert self.cron is not None and self.timezone is not None
        return parse_schedule(self.cron, self.timezone)


@dataclass(frozen=True)
class WindowSpec:
    """A validated window to store: exactly one of (starts_at, ends_at) or (cron, timezone, duration)."""

    starts_at: datetime | None = None
    ends_at: datetime | None = None
    cron: str | None = None
    timezone: str | None = None
    duration_seconds: int | None = None
    note: str | None = None


def _window_iso(value: datetime) -> str:
    return ensure_utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def _window_human(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
