"""Check-ins: outcomes of an external workflow, reported by the scheduler that runs it.

A workflow of kind `external` keeps its schedule in tickwarden but runs elsewhere
(crontab, Airflow, a Kubernetes CronJob of its own). Nothing new watches it; the
existing ledger does:

    ticker ──► run `queued` (no attempt: no worker takes it)
                 │ start                    │ success | fail
                 ▼                          ▼
               run `running` ──────────► one attempt opened and finished through
                 │                        `finish_attempts` ──► poller ──► evaluator
                 ▼ no terminal report by the run's deadline
               deadline detector: `missed` ──► evaluator

So a missing report is a `missed` tick, a `fail` a failed tick (category
`step_error`, owner customer, never retried: tickwarden cannot re-run someone
else's job), and profiles, alerts, threads, escalation and recovery apply
unchanged. The run's deadline follows from what an external job can do, never from
a retry budget (tickwarden never retries it): the cadence's grace after the tick to
report, plus the workflow's timeout once it reported `start`
(`profile.external_run_deadline`). Whoever records the tick (the ticker, a report
arriving first, or the deadline detector's audit of a tick nobody recorded, which is
how the Kubernetes trigger covers external workflows: they get no CronJob) uses it.

Every report takes one path, `record`, whether it came through the ping URL
(`POST /ping/{key}/start|success|fail`), the CLI (`tickwarden checkin`) or a
scenario. The ping key is `secrets.token_urlsafe(32)`; only its SHA-256 is stored,
it is shown once when issued, and issuing another replaces it. Each key is
rate-limited in its own row (a fixed window shared by every replica).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwarden.catalog import budget_for, find_schedule
from tickwarden.clock import isoformat_z, parse_utc
from tickwarden.db import Database
from tickwarden.errors import Conflict, NotFound, TickwardenError, UsageError
from tickwarden.models import AttemptOutcome, Run, Schedule, Workflow
from tickwarden.cadence import CronSchedule, parse_schedule
from tickwarden.sanitize import sanitize_error, sanitize_log_tail
from tickwarden.store import Store, TickRequest

EXTERNAL = "external"
STATUSES = ("start", "success", "fail")
# The worker id a reported attempt is written under (the ledger's `worker_id`).
WORKER_ID = "checkin"
# A report's log excerpt as sent: larger bodies are refused (HTTP 413), a larger
# --log-file is cut to its tail. What is stored is the sanitized tail of it.
MAX_LOG_BYTES = 16 * 1024
# Per key: a job pinging start and end every minute uses 2 a minute; 30 leaves room
# for retries of a flaky network without letting a loop flood the ledger.
RATE_LIMIT = 30
RATE_WINDOW = timedelta(minutes=1)
# What a key may look like: anything else is refused before a database lookup.
KEY_SHAPE = re.compile(r"^[A-Za-z0-9_-]{20,128}$")
MAX_EXIT_CODE = 2**31 - 1
UNKNOWN_KEY = "No check-in URL matches this address."


class RateLimited(TickwardenError):
    """Too many check-ins on this URL; try again shortly."""

    def __init__(self, retry_after_seconds: int):
        super().__init__(f"Too many check-ins on this URL; try again in {retry_after_seconds} s.")
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True)
class Report:
    """One check-in: what happened, to which tick (None: the newest due), and what the job said."""

    status: str
    tick: datetime | None = None
    exit_code: int | None = None
    log: str | None = None


@dataclass(frozen=True)
class Recorded:
    """What a report did: the tick's run as it now stands, and whether the report changed it."""

    tenant: str
    workflow: str
    run: Run
    changed: bool

    def as_dict(self) -> dict[str, object]:
        return {"tenant": self.tenant, "workflow": self.workflow, "tick": isoformat_z(self.run.scheduled_for),
                "run_id": self.run.id, "run_status": self.run.status, "changed": self.changed}


@dataclass(frozen=True)
class IssuedKey:
    key: str
    created_at: datetime
    replaced: bool

    @property
    def path(self) -> str:
        return f"/ping/{self.key}"


def new_key() -> str:
    """Return a fresh, unguessable ping key (256 random bits); only its hash is stored."""
    return secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_report(status: str, *, tick: str | None = None, exit_code: int | None = None,
                 log: str | None = None) -> Report:
    """Check a report's parts as given by a caller; raise UsageError with one sentence."""
    if status not in STATUSES:
        raise UsageError(f"The check-in status must be start, success or fail, not {status[:20]!r}.")
    when = None
    if tick is not None:
        try:
            when = parse_utc(tick.strip())
        except ValueError:
            raise UsageError("The tick must be an ISO 8601 time with a timezone, e.g. 2026-12-01T02:00:00Z.") from None
    if exit_code is not None and not 0 <= exit_code <= MAX_EXIT_CODE:
        raise UsageError(f"The exit code must be between 0 and {MAX_EXIT_CODE}.")
    if log is not None and len(log.encode("utf-8", "surrogatepass")) > MAX_LOG_BYTES:
        raise UsageError(f"The log excerpt exceeds {MAX_LOG_BYTES // 1024} KiB.")
    if log is not None and "\x00" in log:
        raise UsageError("The log excerpt contains a NUL character.")
    return Report(status, when, exit_code, log)


def issue_key(db: Database, tenant: str, workflow: str, now: datetime, *, rotate: bool = False) -> IssuedKey:
    """Issue the ping key of an external workflow; replacing one needs `rotate` (the old URL stops working)."""
    with db.transaction() as store:
        found, _ = find_schedule(store, tenant, workflow)
        _require_external(found, tenant, workflow)
        issued_at = store.checkins.key_issued_at(found.id)
        if issued_at is not None and not rotate:
            raise Conflict(f"Workflow {tenant}/{workflow} already has a check-in URL (issued "
                           f"{isoformat_z(issued_at)}); rotate it to get a new one, and the old one stops working.")
        key = new_key()
        created_at = store.checkins.issue_key(found.id, found.tenant_id, hash_key(key), now)
    return IssuedKey(key, created_at, issued_at is not None)


def report_by_name(db: Database, tenant: str, workflow: str, report: Report, now: datetime) -> Recorded:
    """Record a report for `tenant/workflow` (the CLI's and the simulator's way in)."""
    with db.transaction() as store:
        found, schedule = find_schedule(store, tenant, workflow)
        return record(store, tenant, found, schedule, report, now)


def report_by_key(db: Database, key: str, report: Report, now: datetime) -> Recorded:
    """Record a report sent to a ping URL.

    1. Count the request against the key's rate window, in its own transaction, so a
       refused or failing report still counts (a flood is limited whatever it sends).
    2. Refuse an unknown key with the same sentence whatever the reason, so the
       answer says nothing about which keys exist.
    3. Record the report for the key's workflow, and only that workflow.
    """
    if not KEY_SHAPE.match(key):
        raise NotFound(UNKNOWN_KEY)
    with db.transaction() as store:
        use = store.checkins.use_key(hash_key(key), now, now - RATE_WINDOW)
    if use is None:
        raise NotFound(UNKNOWN_KEY)
    if use.window_count > RATE_LIMIT:
        remaining = use.window_start + RATE_WINDOW - now
        raise RateLimited(max(1, int(remaining.total_seconds() + 0.999)))
    with db.transaction() as store:
        found = store.catalog.get_workflow(use.workflow_id)
        schedule = store.catalog.get_schedule_for_workflow(use.workflow_id)
        owner = store.catalog.get_tenant(use.tenant_id)
        if found is None or schedule is None or owner is None:
            raise NotFound(UNKNOWN_KEY)
        return record(store, owner.name, found, schedule, report, now)


def record(store: Store, tenant: str, workflow: Workflow, schedule: Schedule, report: Report,
           now: datetime) -> Recorded:
    """Apply one report to its tick's run: the one state change every way in shares.

    1. The workflow must be external, live and active.
    2. The tick is the one given (a fire time of the schedule, not in the future, not
       before the schedule was published) or else the newest tick due at `now`.
    3. The tick's run is the ticker's, or recorded now with the same budget when the
       report arrives first (`ON CONFLICT DO NOTHING`: the ticker's is the same row).
    4. `start` moves a queued run to running and extends its deadline by the timeout;
       `success`/`fail` open one attempt and
       finish it through `finish_attempts`, which moves the run and wakes the poller.
       A run that already has a verdict (a late report after `missed`) is refused:
       a report never rewrites history.
    """
    label = f"{tenant}/{workflow.name}"
    _require_external(workflow, tenant, workflow.name)
    if workflow.archived_at is not None:
        raise Conflict(f"Workflow {label} is archived; apply its file again to restore it.")
    if schedule.status != "active":
        raise Conflict(f"Workflow {label} is paused; resume it to record check-ins.")
    cron = parse_schedule(schedule.cron, schedule.timezone)
    tick = _resolve_tick(cron, schedule, report.tick, now, label)
    run = store.ledger.get_run_for_tick(workflow.id, tick)
    budget = budget_for(schedule.cadence_seconds, workflow.policy_overrides, False, workflow.timeout_seconds)
    if run is None:
        store.ledger.create_tick_run(TickRequest(workflow.tenant_id, workflow.id, tick, 0, budget.external_deadline(tick)),
                              now)
        run = store.ledger.get_run_for_tick(workflow.id, tick)
        assert run is not None
    if report.status == "start":
        if run.status == "running":
            return Recorded(tenant, workflow.name, run, False)
        started = store.checkins.start_run(run.id, now, budget.external_deadline(tick, started=True))
        if started is None:
            raise _already_decided(label, run)
        return Recorded(tenant, workflow.name, started, True)
    attempt = store.checkins.open_attempt(run, WORKER_ID, now)
    if attempt is None:
        raise _already_decided(label, store.ledger.get_run(run.id, run.scheduled_for) or run)
    store.ledger.finish_attempt(attempt, WORKER_ID, _outcome(report), now)
    finished = store.ledger.get_run(run.id, run.scheduled_for)
    assert finished is not None
    return Recorded(tenant, workflow.name, finished, True)


def _require_external(workflow: Workflow, tenant: str, name: str) -> None:
    if workflow.kind != EXTERNAL:
        raise UsageError(f"Workflow {tenant}/{name} is run by tickwarden; only a workflow of kind external "
                         "takes check-ins.")


def _already_decided(label: str, run: Run) -> Conflict:
    return Conflict(f"The tick {isoformat_z(run.scheduled_for)} of {label} is already {run.status}; "
                    "a late report does not change it.")


def _resolve_tick(cron: CronSchedule, schedule: Schedule, tick: datetime | None, now: datetime, label: str) -> datetime:
    """Return the tick a report is for: the given one, checked, or the newest due at `now`."""
    earliest = schedule.published_at or schedule.created_at
    if tick is None:
        newest = newest_tick(cron, now)
        if newest is None or newest < earliest:
            raise Conflict(f"Workflow {label} has no tick due yet to report on.")
        return newest
    if tick > now:
        raise UsageError(f"The tick {isoformat_z(tick)} is in the future.")
    if cron.next_after(tick - timedelta(microseconds=1)) != tick:
        raise UsageError(f"{isoformat_z(tick)} is not a tick of {label}'s schedule ({schedule.cron}, {schedule.timezone}).")
    if tick < earliest:
        raise UsageError(f"The tick {isoformat_z(tick)} is before {label}'s schedule was published.")
    return tick


def newest_tick(cron: CronSchedule, now: datetime) -> datetime | None:
    """Return the newest fire time at or before `now` (None within about a year and a half)."""
    # Look back over growing spans: a frequent schedule is answered from the last hour,
    # a yearly one in a few widenings, without walking a year of minutes.
    span, limit = timedelta(hours=1), timedelta(days=550)
    while True:
        span = min(span, limit)
        found = None
        for fire in cron.fires_between(now - span, now):
            found = fire
        if found is not None or span == limit:
            return found
        span *= 4


def _outcome(report: Report) -> AttemptOutcome:
    log_tail = sanitize_log_tail(report.log) if report.log else None
    outputs = {} if report.exit_code is None else {"exit_code": report.exit_code}
    if report.status == "success":
        return AttemptOutcome(status="succeeded", log_tail=log_tail, outputs=outputs)
    said = f" (exit code {report.exit_code})" if report.exit_code is not None else ""
    return AttemptOutcome(status="failed", error_category="step_error",
                          error=sanitize_error(f"the job reported failure{said}"),
                          failed_step=None, retryable=False, log_tail=log_tail, outputs=outputs)
