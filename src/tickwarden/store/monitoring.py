"""Monitoring operations: claiming outcomes, evaluation inputs, alert transitions, deadlines.

Every alert transition is one statement that changes the alert and writes its event
together (a compare-and-set, so replicas never write an event twice); callers hand
the returned event ids to `enqueue_notifications` in the same transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from tickwarden.models import Alert, AlertEvent, AlertView, from_row
from tickwarden.store.arrays import BigintArray, TextArray, TimestamptzArray
from tickwarden.store.base import StoreBase, record_builder
from tickwarden.store.ledger import in_months, month_bounds, recent_months
from tickwarden.store.queries import queries


# What `advance_text` cuts from `monitoring_record_missed_and_advance` (compacted, as `queries()` holds it).
_ADVANCED, _ADVANCED_END = "\n), advanced AS (\n", "\n)\nSELECT run_id"


@functools.cache
def advance_text() -> str:
    """`monitoring_record_missed_and_advance` with no tick to record: its watermarks' update alone.

    A data-modifying CTE is set up at every execution, rows or none: the insert of missed
    runs opened the partitioned `runs` for its routing, with its conflict arbiter, its
    RETURNING and the sort of what it returned, at every pass that recorded nothing (nearly
    every pass). The update is cut from the statement's own text, so the two stay one.
    """
    text = queries()["monitoring_record_missed_and_advance"]
    if text.count(_ADVANCED) != 1 or text.count(_ADVANCED_END) != 1:
        raise AssertionError("monitoring_record_missed_and_advance changed: advance_text must be told what to cut")
    return text[text.index(_ADVANCED) + len(_ADVANCED):text.index(_ADVANCED_END)]


@dataclass(frozen=True)
class ClaimedAttempt:
    attempt_id: int
    run_id: int
    # The run's tick, which names its month to the statements that write the run: for a run
    # pending a retry, the one status whose run the pass may write; None for any other (unread:
    # the client's conversion of a timestamptz is dearer than the rest of such a row's columns).
    run_scheduled_for: datetime | None
    workflow_id: int
    finished_at: datetime
    run_status: str
    run_error_category: str | None
    alert_open: bool  # a success's workflow has an open alert to resolve; false for any other status
    # The claim took charge of the run's retry (pending_retry, retryable, its tick in the claim's
    # months): the caller launches none for it. Then the attempt it launched and when that may
    # start, both None when the compare-and-set found the run moved on.
    retry_sent: bool = False
    retry_attempt_id: int | None = None
    retry_queued_at: datetime | None = None


@dataclass(frozen=True)
class EvaluationInput:
    """What the evaluator knows about one workflow at one moment."""

    workflow_id: int
    tenant_id: int
    monitoring_enabled: bool
    policy_overrides: dict[str, Any] | str  # the stored JSON's text: `alerts.profile_of`'s cache key as it is
    shadow: bool
    cadence_seconds: int | None
    failures: int
    first_failure_at: datetime | None
    last_failure_run_id: int | None
    last_failure_at: datetime | None
    last_error_category: str | None
    last_error: str | None
    last_failed_step: str | None
    success_run_id: int | None
    success_at: datetime | None
    alert_id: int | None
    alert_failure_count: int | None
    alert_reason: str | None = None
    rate_window: int | None = None  # the window the failure rate was counted over; None: not counted
    rate_ticks: int = 0
    rate_failures: int = 0


# A profile with a failure-rate rule, by what the evaluation reads of a workflow: (its cadence, the
# unscheduled one for none; its overrides' stored text; the rate window; alert_after). A tuple, not
# a class of its own: the alert path copies its values into as few shapes as it can.
RateProfile = tuple[int, str, int, int]


@dataclass(frozen=True)
class OpenAlert:
    """An alert to open (one row of a batch)."""

    tenant_id: int
    workflow_id: int
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
    run_id: int | None
    category: str | None
    error: str | None
    failed_step: str | None
    reason: str = "consecutive_failures"


@dataclass(frozen=True)
class FailureRate:
    """How many of a workflow's newest confirmed scheduled ticks (at most the window asked for) failed."""

    workflow_id: int
    ticks: int
    failures: int


@dataclass(frozen=True)
class FailureUpdate:
    """A later confirmed failure recorded on an open alert."""

    alert_id: int
    failure_count: int
    last_failure_at: datetime
    run_id: int | None
    category: str | None
    error: str | None
    failed_step: str | None
    owner: str  # the newest failure's owner; the statement keeps a pinned one


@dataclass(frozen=True)
class Transition:
    """An alert that changed and the event written for it."""

    alert_id: int
    workflow_id: int
    event_id: int
    escalates: bool = False  # a warning whose failures reached escalation (opening and recording a failure say)


@dataclass(frozen=True)
class TickAudit:
    schedule_id: int
    checked_until: datetime
    tenant_id: int
    workflow_id: int
    cron: str
    timezone: str
    status: str
    starting_deadline_seconds: int
    archived: bool
    kind: str = "managed"
    cadence_seconds: int = 0
    # Ticks after `checked_until`, up to the pass's `now`, that already have their run
    # when the audit is taken: a walk records only the others missed.
    ran: list[datetime] = field(default_factory=list)


# The columns of `monitoring_lock_overdue_and_arm`, read by position: a watermark's (`TickAudit`'s
# fields in order; all NULL for an overdue run), then an overdue run's id and tick (NULL for a watermark).
AUDIT_COLUMNS = (*(f.name for f in fields(TickAudit)), "run_id", "run_scheduled_for")
_RUN = len(fields(TickAudit))  # where the overdue run's columns start


# How long into a month the claim still launches the retries of the month before's ticks.
LAUNCH_OVERLAP = timedelta(days=7)


def launch_months(now: datetime) -> tuple[tuple[int, int], tuple[int, int]]:
    """The months (year, month; UTC) of the ticks whose retries the claim launches: `now`'s, and
    the one before as well until `LAUNCH_OVERLAP` into `now`'s month.

    Each month is one partition of runs more among the launch's UPDATE's result relations and
    one of attempts more that its insert reads, set up and torn down by every claim, launching
    or not (a claim of 8 outcomes, none pending a retry, on a ledger of 16 month partitions:
    about 84,000 of the server's instructions, ~420,000 for the whole launch, callgrind). A run
    pending a retry has failed within its backoff and its deadline, so once a week of the month
    has passed its tick lies in that month; an older one, as any the claim leaves, is launched
    by the pass's call of the retry engine: the same attempt, due at the same time.
    """
    at = now.astimezone(UTC)
    if at - at.replace(day=1, hour=0, minute=0, second=0, microsecond=0) < LAUNCH_OVERLAP:
        return recent_months(at)
    return (at.year, at.month), (at.year, at.month)


@functools.lru_cache(maxsize=16)
def claim_text(limit: int, months: tuple[tuple[int, int], tuple[int, int]]) -> str:
    """The claim with its batch size and its retry launch's months written in.

    A poller has one batch size and, a week or more long, the same months (`launch_months`),
    so the server keeps one plan of the text.
    """
    if limit < 1:
        raise ValueError("a claim takes at least one attempt")
    return (queries()["monitoring_claim_finished_attempts"].replace("{limit}", str(int(limit)))
            .replace("{retry_launch}", retry_launch()).replace("{months}", month_bounds(*months)))


# What `retry_launch` replaces in `ledger_queue_retries` (compacted, as `queries()` holds it).
_GIVEN_RUNS = "= ANY(%(run_ids)b::bigint[])"
_GIVEN_TICKS = "= ANY(%(run_scheduled_fors)b::timestamptz[])"
_INSERT = "\n)\nINSERT INTO attempts "


@functools.cache
def retry_launch() -> str:
    """`ledger_queue_retries` as the claim's CTEs `moved` and `launched`, for the runs its `looked` marks `retry_sent`.

    The writes are that statement's own, word for word (one owner of a retry's launch), with
    their runs taken from the claim's rows instead of bound arrays; `{months}` stays for
    `claim_text` to fill.
    """
    text = queries()["ledger_queue_retries"]
    if (not text.startswith("WITH moved AS (") or text.count(_GIVEN_RUNS) != 1 or text.count(_GIVEN_TICKS) != 1
            or text.count(_INSERT) != 1):
        raise AssertionError("ledger_queue_retries changed: retry_launch must be told what to replace")
    text = (text.removeprefix("WITH ").removesuffix(";")
            .replace(_GIVEN_RUNS, "= ANY (ARRAY(SELECT run_id FROM looked WHERE retry_sent))")
            .replace(_GIVEN_TICKS, "= ANY (ARRAY(SELECT run_scheduled_for FROM looked WHERE retry_sent))"))
    return text.replace(_INSERT, "\n), launched AS (\nINSERT INTO attempts ") + "\n)"


def _transition(row: dict[str, Any]) -> Transition:
    return Transition(**row)  # the statements return exactly these columns


class MonitoringRepository(StoreBase):
    def finished_attempts_waiting(self, now: datetime) -> bool:
        """Whether any finished attempt waits for the poller (has an outcome_queue row)."""
        row = self._row("monitoring_finished_waiting", {"now": now})
        return bool(row and row["found"])

    def escalations_waiting(self, now: datetime) -> bool:
        """Whether any open warning is due to escalate."""
        row = self._row("monitoring_escalation_waiting", {"now": now})
        return bool(row and row["found"])

    def claim_finished_attempts(
        self, now: datetime, limit: int, after: tuple[datetime, int] | None = None, *,
        not_retryable: Sequence[str] | None = None, patient: Sequence[str] = (),
    ) -> list[ClaimedAttempt]:
        """Claim up to `limit` finished attempts waiting for the poller, deleting their queue rows.

        With `after` (finished_at, attempt id) only attempts past that position are
        looked at: what lies before it waits for a claim without one.

        Given `not_retryable` (the categories that never succeed on retry), the same statement
        launches the retry of each claimed run pending one whose category is not among them and
        whose tick lies in `launch_months(now)` (`retry_sent`), as
        `ledger.queue_retries` would with `patient`; the caller launches the others' as before.
        """
        after_at, after_id = after if after is not None else (None, None)
        return self._records("monitoring_claim_finished_attempts",
                             {"now": now, "after_at": after_at, "after_id": after_id,
                              "launch": not_retryable is not None, "not_retryable": TextArray(not_retryable or ()),
                              "patient": TextArray(patient)},
                             ClaimedAttempt, claim_text(limit, launch_months(now)))

    def fail_unretryable(
        self, runs: Sequence[tuple[int, datetime]], categories: Sequence[str], now: datetime
    ) -> list[tuple[int, int]]:
        """Fail runs (id, tick) pending a retry whose category never succeeds on retry; return (run, workflow)."""
        if not runs:
            return []
        ticks = sorted({t for _, t in runs})
        rows = self._fetch(
            in_months("monitoring_fail_unretryable", ticks),
            {"run_ids": [r for r, _ in runs], "run_scheduled_fors": ticks, "categories": list(categories), "now": now},
        )
        return [(r["id"], r["workflow_id"]) for r in rows]

    def lock_workflows_for_evaluation(self, workflow_ids: Sequence[int]) -> None:
        """Hold each workflow's evaluation lock until the transaction ends.

        Sent, not read: the statements after it in the transaction run only once it holds
        every lock, and an error it raises fails the transaction at the next read.
        """
        if workflow_ids:
            self._send("monitoring_lock_workflows", {"workflow_ids": BigintArray(sorted(set(workflow_ids)))})

    def evaluation_inputs(
        self, workflow_ids: Sequence[int], rate_profiles: Sequence[RateProfile] = (), unscheduled: int = 0,
        now: datetime | None = None,
    ) -> list[EvaluationInput]:
        """The evaluator's inputs, with the failure rate of each workflow whose profile is in `rate_profiles`
        (a workflow without a schedule has cadence `unscheduled`) and whose state needs it.

        `now` bounds the walks of the ledger (a day past it: see the statement), so the server
        skips the month partitions no run can be in; None, for a look outside any evaluation
        (tests, benchmarks), reads them all, with the same result.
        """
        if not workflow_ids:
            return []
        params = {"workflow_ids": BigintArray(workflow_ids), "unscheduled": unscheduled, "now": now,
                  "rate_cadences": BigintArray([p[0] for p in rate_profiles]),
                  "rate_overrides": TextArray([p[1] for p in rate_profiles]),
                  "rate_windows": BigintArray([p[2] for p in rate_profiles]),
                  "rate_alert_afters": BigintArray([p[3] for p in rate_profiles])}
        return self._records("monitoring_evaluation_inputs", params, EvaluationInput)

    def open_alerts(self, wanted: Sequence[OpenAlert], now: datetime) -> list[Transition]:
        if not wanted:
            return []
        return [_transition(r) for r in self._batch("monitoring_open_alerts", wanted, {"now": now})]

    def failure_rates(self, windows: dict[int, int], now: datetime | None = None) -> dict[int, FailureRate]:
        """Recount each workflow's failures among its last `window` confirmed scheduled ticks (`now`: as
        `evaluation_inputs`)."""
        if not windows:
            return {}
        ids = sorted(windows)
        rows = self._rows("monitoring_failure_rates", {"workflow_ids": ids, "windows": [windows[i] for i in ids],
                                                       "now": now})
        return {r["workflow_id"]: FailureRate(**r) for r in rows}

    def record_alert_failures(self, updates: Sequence[FailureUpdate], now: datetime) -> list[Transition]:
        if not updates:
            return []
        return [_transition(r) for r in self._batch("monitoring_record_failures", updates, {"now": now})]

    def escalate_alerts(self, alert_ids: Sequence[int], reason: str, now: datetime) -> list[Transition]:
        """Escalate those of the alerts whose failures reached escalation (`alerts.failures_reached_escalation`)."""
        if not alert_ids:
            return []
        rows = self._rows("monitoring_escalate_alerts", {"alert_ids": list(alert_ids), "reason": reason, "now": now})
        return [_transition(r) for r in rows]

    def escalate_due_alerts(self, now: datetime, limit: int) -> list[Transition]:
        return [_transition(r) for r in self._rows("monitoring_escalate_due", {"now": now, "limit": limit})]

    def resolve_alerts(self, resolutions: Sequence[tuple[int, int | None]], now: datetime) -> list[Transition]:
        """Resolve (alert id, resolving run id) pairs still open."""
        if not resolutions:
            return []
        params = {"alert_ids": [a for a, _ in resolutions], "run_ids": [r for _, r in resolutions], "now": now}
        return [_transition(r) for r in self._rows("monitoring_resolve_alerts", params)]

    def lock_alert(self, alert_id: int) -> Alert | None:
        row = self._row("monitoring_lock_alert", {"alert_id": alert_id})
        return from_row(Alert, row) if row else None

    def reassign_alert(
        self, alert_id: int, owner: str, previous: str, note: str | None, actor: str, now: datetime
    ) -> AlertEvent | None:
        row = self._row(
            "monitoring_reassign_alert",
            {"alert_id": alert_id, "owner": owner, "previous": previous, "note": note, "actor": actor, "now": now},
        )
        return from_row(AlertEvent, row) if row else None

    def add_alert_note(self, alert_id: int, note: str, actor: str, now: datetime,
                       internal: bool = False) -> AlertEvent | None:
        row = self._row("monitoring_add_note",
                        {"alert_id": alert_id, "note": note, "actor": actor, "now": now, "internal": internal})
        return from_row(AlertEvent, row) if row else None

    def acknowledge_alert(self, alert_id: int, actor: str, note: str | None, now: datetime) -> AlertEvent | None:
        row = self._row("monitoring_acknowledge_alert", {"alert_id": alert_id, "actor": actor, "note": note, "now": now})
        return from_row(AlertEvent, row) if row else None

    def snooze_alert(self, alert_id: int, until: datetime, actor: str, note: str | None,
                     now: datetime) -> AlertEvent | None:
        row = self._row("monitoring_snooze_alert",
                        {"alert_id": alert_id, "until": until, "actor": actor, "note": note, "now": now})
        return from_row(AlertEvent, row) if row else None

    def resolve_alert_by_hand(self, alert_id: int, actor: str, note: str, now: datetime) -> AlertEvent | None:
        row = self._row("monitoring_resolve_alert_by_hand",
                        {"alert_id": alert_id, "actor": actor, "note": note, "now": now})
        return from_row(AlertEvent, row) if row else None

    def note_workflow_paused(self, workflow_id: int, actor: str, note: str, now: datetime) -> list[AlertEvent]:
        rows = self._rows("monitoring_note_paused", {"workflow_id": workflow_id, "actor": actor, "note": note,
                                                     "now": now})
        return [from_row(AlertEvent, r) for r in rows]

    def get_alert(self, alert_id: int) -> AlertView | None:
        row = self._row("monitoring_get_alert", {"alert_id": alert_id})
        return AlertView(from_row(Alert, row), row["tenant"], row["workflow"]) if row else None

    def list_alerts(self, *, tenant: str | None = None, open_only: bool = False, limit: int = 200) -> list[AlertView]:
        rows = self._rows("monitoring_list_alerts", {"tenant": tenant, "open_only": open_only, "limit": limit})
        return [AlertView(from_row(Alert, r), r["tenant"], r["workflow"]) for r in rows]

    def list_alert_events(self, alert_id: int) -> list[AlertEvent]:
        return [from_row(AlertEvent, r) for r in self._rows("monitoring_list_alert_events", {"alert_id": alert_id})]

    def close_overdue_and_arm(self, now: datetime, limit: int, error: str, lookback_start: datetime
                              ) -> list[tuple[int, int]]:
        """Give runs past their deadline the verdict missed and arm new watermarks; return (run, workflow)."""
        return self.close_overdue_and_take_audits(now, limit, error, lookback_start, 0)[0]

    def close_overdue_and_take_audits(
        self, now: datetime, limit: int, error: str, lookback_start: datetime, audit_limit: int
    ) -> tuple[list[tuple[int, int]], list[TickAudit]]:
        """`close_overdue_and_arm`, and the due watermarks (up to `audit_limit`, none for 0).

        One statement locks the overdue runs, arms and takes the watermarks; the runs it locked
        (a row with no schedule) are then closed by a second, sent only when there are any
        (`monitoring_close_overdue`), in the same transaction: nearly every pass has none, and a
        statement that could close them sets up its writes of runs and attempts at every
        execution. The due watermarks are those `due_tick_audits` would read right after the
        arming, in its order: the ones armed come back from the arming itself, the others are
        read as they were before it (see the statement).
        """
        rows = self._tuples("monitoring_lock_overdue_and_arm",
                            {"now": now, "limit": limit, "lookback_start": lookback_start, "audit_limit": audit_limit})
        # By position (no dict a row: some 14,500 watermarks a simulated day): `TickAudit`'s fields, then
        # the overdue run's id and tick, its schedule_id NULL (`AUDIT_COLUMNS`).
        overdue = [(r[_RUN], r[_RUN + 1]) for r in rows if r[0] is None]
        return (self._close_overdue(overdue, now, error) if overdue else [],
                record_builder(TickAudit)([r[:_RUN] for r in rows if r[0] is not None]))

    def _close_overdue(self, runs: Sequence[tuple[int, datetime]], now: datetime, error: str) -> list[tuple[int, int]]:
        """Give the overdue runs (id, tick) this transaction locked the verdict missed; return (run, workflow) by id."""
        ticks = [tick for _, tick in runs]
        rows = self._fetch(in_months("monitoring_close_overdue", ticks),
                           {"run_ids": BigintArray([run for run, _ in runs]),
                            "run_scheduled_fors": TimestamptzArray(ticks), "now": now, "error": error})
        return [(r["run_id"], r["workflow_id"]) for r in rows]

    def due_tick_audits(self, now: datetime, limit: int) -> list[TickAudit]:
        """The due watermarks, read on their own: what `close_overdue_and_take_audits` must take."""
        return [from_row(TickAudit, r) for r in self._rows("monitoring_due_tick_audits", {"now": now, "limit": limit})]

    def record_missed_and_advance(
        self,
        ticks: Sequence[tuple[int, int, datetime]],
        advances: Sequence[tuple[int, datetime, datetime | None]],
        error: str,
        now: datetime,
    ) -> list[tuple[int, int, datetime]]:
        """Insert (tenant, workflow, tick) as missed runs and move the watermarks on.

        Returns (run, workflow, tick) of the runs created. With no tick to record nothing
        can be created: the statement is then only sent (`_send`), and on the simulator's
        pipelined connection goes out, at no round trip of its own, with the next statement
        read (its COMMIT with it); elsewhere it is a round trip as before. It is then the
        watermarks' update alone (`advance_text`), without the insert of runs that would
        insert none: most passes record no missed tick.
        """
        if not ticks and not advances:
            return []
        params = {
            "tenant_ids": BigintArray([t[0] for t in ticks]),
            "workflow_ids": BigintArray([t[1] for t in ticks]),
            "scheduled_fors": TimestamptzArray([t[2] for t in ticks]),
            "schedule_ids": BigintArray([a[0] for a in advances]),
            "checked_untils": TimestamptzArray([a[1] for a in advances]),
            "next_check_ats": TimestamptzArray([a[2] for a in advances]),
            "error": error,
            "now": now,
        }
        if not ticks:
            self._send_text(advance_text(), params)
            return []
        rows = self._rows("monitoring_record_missed_and_advance", params)
        return [(r["run_id"], r["workflow_id"], r["scheduled_for"]) for r in rows]
