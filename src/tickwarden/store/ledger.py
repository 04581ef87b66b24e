"""Ledger operations: runs (the customer's view) and attempts (the engineer's view).

The run and attempt state machines are drawn in `migrations/0001_initial.sql`
beside the tables that enforce them; here every transition is one statement and a
compare-and-set, so several replicas can call any of these at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg.types.json import Jsonb

from tickwarden.models import Attempt, AttemptOutcome, FinishedAttempt, Run, from_row
from tickwarden.store.arrays import BigintArray, TextArray, TimestamptzArray
from tickwarden.store.base import StoreBase, record_builder
from tickwarden.store.queries import queries
from tickwarden.store.trigger import Advance, int_array_literal

# Before any success: every confirmed failure of the workflow belongs to the streak.
# Attempts of one run the platform may lose (a dead worker, an expired lease) and queue
# again without spending the tick's retry budget: enough for a crash or two, bounded so
# that a workflow that kills its worker every time still ends failed.
FREE_LOST_REQUEUES = 2


@dataclass(frozen=True)
class LaunchedRetry:
    """A retry's attempt as `queue_retries` queued it: the columns its callers read, not the whole
    attempt (a whole row per retry, its outputs' JSON parsed, was a tenth of the poller's CPU)."""

    id: int
    run_id: int
    number: int
    queued_at: datetime  # when it may start: the backoff's end, or the launch


@dataclass(frozen=True)
class TickRequest:
    """A tick the trigger wants recorded as a run."""

    tenant_id: int
    workflow_id: int
    scheduled_for: datetime
    retry_budget: int
    deadline_at: datetime
    retry_backoff_seconds: tuple[int, ...] = ()


@dataclass(frozen=True)
class TickGroup:
    """Ticks that many workflows share: the same fire times, deadlines, retry budget and backoffs.

    `workflow_ids` and `tenant_ids` are PostgreSQL array text, index for index (as the
    claim returns them), so that a fleet's members cross the client untouched.
    `first_attempt` is 1, 0 for an external workflow (no worker runs it), or None to
    look the workflow's kind up.
    """

    workflow_ids: str
    tenant_ids: str
    ticks: tuple[tuple[datetime, datetime], ...]   # (scheduled_for, deadline_at), oldest first
    retry_budget: int
    retry_backoff_seconds: tuple[int, ...] = ()
    first_attempt: int | None = None


# The runs' columns for callers that want the runs; only what the attempts need for the
# ticker, which wants their count (at 100,000 ticks, rows sent back and turned into
# dataclasses cost more than the inserts they report).
DETAILED = ("*", "SELECT run.* FROM run ORDER BY run.scheduled_for, run.workflow_id")
COUNTED = ("id, tenant_id, workflow_id, scheduled_for, attempts_count", "SELECT count(*) AS created FROM run")


# How the insert meets a run its tick already has: nothing, for a caller that may race
# another writer of the tick; an error, for the one writer of its ticks (`exclusive`).
TOLERANT = "ON CONFLICT (workflow_id, scheduled_for) WHERE NOT manual DO NOTHING"


def in_months(name: str, ticks: Sequence[datetime]) -> str:
    """Query `name` with its `{months}` standing for the whole UTC months `ticks` lie in, as constants.

    `{months}` follows a tick column: `BETWEEN` the first instant of the earliest tick's
    month and the last of the latest's. The ledger's partitions are those months, so a
    plan of the text holds only their partitions however it is made: the server may keep
    one plan for every batch of the same months (a handful of texts in a deployment's
    life) instead of planning each afresh to prune by an array parameter.
    """
    first, last = min(ticks).astimezone(UTC), max(ticks).astimezone(UTC)
    return _in_months(name, (first.year, first.month), (last.year, last.month))


@functools.lru_cache(maxsize=64)
def _in_months(name: str, first: tuple[int, int], last: tuple[int, int]) -> str:
    return queries()[name].replace("{months}", month_bounds(first, last))


def month_bounds(first: tuple[int, int], last: tuple[int, int]) -> str:
    """`BETWEEN` the first instant of month `first` (year, month) and the last of `last`, as constants (UTC)."""
    start = datetime(*first, 1, tzinfo=UTC)
    year, month = last
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC) - timedelta(microseconds=1)
    return f"BETWEEN '{start.isoformat(sep=' ')}'::timestamptz AND '{end.isoformat(sep=' ')}'::timestamptz"


def recent_months(now: datetime) -> tuple[tuple[int, int], tuple[int, int]]:
    """The month before `now`'s and `now`'s own (year, month; UTC): where the ticks of work finishing now lie."""
    at = now.astimezone(UTC)
    before = (at.year, at.month - 1) if at.month > 1 else (at.year - 1, 12)
    return before, (at.year, at.month)


@functools.cache
def _create_tick_runs(shape: tuple[str, str], exclusive: bool = False) -> str:
    returning, result = shape
    return (queries()["ledger_create_tick_runs"].replace("{returning}", returning).replace("{result}", result)
            .replace("{on_conflict}", "" if exclusive else TOLERANT))


@dataclass(frozen=True)
class ReapedLeases:
    """What one pass over expired leases did: attempts marked lost, and attempts leased ahead given back."""

    lost: list[FinishedAttempt]
    requeued: list[int]

    def __len__(self) -> int:
        return len(self.lost) + len(self.requeued)


class LedgerRepository(StoreBase):
    def create_tick_runs(
        self, ticks: Sequence[TickRequest], now: datetime, advances: Sequence[Advance] = ()
    ) -> list[Run]:
        """Record each tick as a run with a queued first attempt, and move claimed schedules on; return the runs created."""
        if not ticks and not advances:
            return []
        groups = [TickGroup(int_array_literal((t.workflow_id,)), int_array_literal((t.tenant_id,)),
                            ((t.scheduled_for, t.deadline_at),), t.retry_budget, t.retry_backoff_seconds)
                  for t in ticks]
        return [from_row(Run, row) for row in self._fetch(_create_tick_runs(DETAILED),
                                                           tick_params(groups, now, advances))]

    def create_tick_groups(self, groups: Sequence[TickGroup], now: datetime, advances: Sequence[Advance] = ()) -> int:
        """As `create_tick_runs`, for ticks shared by groups of workflows; return how many runs were created."""
        return self.submit_tick_groups(groups, now, advances)()

    def submit_tick_groups(
        self, groups: Sequence[TickGroup], now: datetime, advances: Sequence[Advance] = ()
    ) -> Callable[[], int]:
        """`create_tick_groups` sent now; the returned reader says how many runs it created (`StoreBase._submit`),
        passing over a tick that already has its run."""
        if not groups and not advances:
            return lambda: 0
        read = self._submit_text(_create_tick_runs(COUNTED), tick_params(groups, now, advances))
        return lambda: int(read()[0]["created"])

    def send_tick_groups(self, groups: Sequence[TickGroup], now: datetime, advances: Sequence[Advance] = ()) -> None:
        """Record the ticks with a plain insert whose count is never read: every run it is given, or an error.

        For the caller that holds the fire rows of the schedules whose ticks these are, and so
        is their one writer: a run already there fails the statement with `UniqueViolation`
        (the transaction is lost, nothing is written twice) instead of being passed over. The
        error is raised where the transaction's next result is read, at the latest at its
        commit (`StoreBase._send`), not by a read of its own.
        """
        if groups or advances:
            self._send_text(_create_tick_runs(COUNTED, exclusive=True), tick_params(groups, now, advances))

    def create_tick_run(self, tick: TickRequest, now: datetime) -> Run | None:
        """Record one tick; None when another caller already did."""
        created = self.create_tick_runs([tick], now)
        return created[0] if created else None

    def create_manual_run(
        self,
        *,
        tenant_id: int,
        workflow_id: int,
        retry_budget: int,
        deadline_at: datetime,
        now: datetime,
        requested_by: str | None = None,
        retry_backoff_seconds: Sequence[int] = (),
    ) -> Run:
        row = self._row(
            "ledger_create_manual_run",
            {
                "tenant_id": tenant_id,
                "workflow_id": workflow_id,
                "retry_budget": retry_budget,
                "deadline_at": deadline_at,
                "requested_by": requested_by,
                "retry_backoff_seconds": list(retry_backoff_seconds),
                "now": now,
            },
        )
        assert row is not None
        return from_row(Run, row)

    def lease_attempts_with_ticks(
        self, worker_id: str, now: datetime, lease_seconds: float, limit: int = 1
    ) -> list[tuple[Attempt, datetime]]:
        """Lease up to `limit` queued attempts for `worker_id`, each with its run's tick.

        The lease's statements (`lease_statements`: the queue's rows locked, then leased with
        their months told inside the server), sent together: one round trip on a connection in
        autocommit (one implicit transaction of their own) or in pipeline mode (the simulator's,
        in its transaction); two inside a caller's transaction outside pipeline mode.
        """
        (lock, lock_params), (write, write_params) = lease_statements(worker_id, now, lease_seconds, limit)
        # Outside pipeline mode libpq's status tells a transaction; the pipelined connection is always in one.
        if (self.conn.autocommit and self.conn.pgconn.pipeline_status == PipelineStatus.OFF
                and self.conn.info.transaction_status == TransactionStatus.IDLE):
            exchanged = self._exchange([(lock, lock_params), (write, write_params)], tuples=(write,))
            return leased_from_rows(exchanged[1])
        # The lock's rows are the server's to read (its settings tell the writes what it locked):
        # sent, not read, it builds no row here (a simulated day leases some 15,000 attempts), and
        # an error of it is raised by the read of the writes, which comes after it.
        self._send(lock, lock_params)
        return leased_from_rows(self._submit_text(queries()[write], write_params, tuples=True)())

    def renew_lease(self, attempt: Attempt, worker_id: str, now: datetime, lease_seconds: float) -> bool:
        """Extend the lease; False when the worker no longer holds it."""
        return (
            self._execute(
                "ledger_renew_lease",
                {
                    "attempt_id": attempt.id,
                    "run_scheduled_for": attempt.run_scheduled_for,
                    "worker_id": worker_id,
                    "now": now,
                    "lease_expires_at": now + timedelta(seconds=lease_seconds),
                },
            )
            == 1
        )

    def finish_attempt(self, attempt: Attempt, worker_id: str, outcome: AttemptOutcome, now: datetime, *,
                       steps: Sequence[dict[str, Any]] = ()) -> FinishedAttempt:
        """Record an attempt's outcome and its `steps` rows and move its run; applied once however often
        delivered."""
        return self.finish_attempts(worker_id, [(attempt, outcome, now)],
                                    steps=[{**step, "attempt_id": attempt.id} for step in steps])[0]

    def finish_attempts(
        self, worker_id: str, finished: Sequence[tuple[Attempt, AttemptOutcome, datetime]], *,
        steps: Sequence[dict[str, Any]] = (),
    ) -> list[FinishedAttempt]:
        """Record the outcomes of several attempts of distinct runs in one statement, in order given."""
        if not finished:
            return []
        return finished_from_rows(finished, self._fetch(finish_text(finished, steps=bool(steps)),
                                                        finish_params(worker_id, finished, steps=steps)))

    def expire_leases(self, now: datetime, limit: int = 500) -> list[FinishedAttempt]:
        """Act on up to `limit` expired leases (`reap_leases`); return the attempts marked lost."""
        return self.reap_leases(now, limit).lost

    def reap_leases(self, now: datetime, limit: int = 500) -> ReapedLeases:
        """Act on up to `limit` attempts whose lease expired before `now`, each once.

        A started attempt is marked lost and its run moved (pending_retry or failed); a
        run re-queued for free (`FREE_LOST_REQUEUES` per run, before its deadline) keeps
        its budget. An attempt leased ahead and never started goes back to the queue as
        it was, its run untouched but for running → queued, nothing spent.

        One statement (`reap_text`): the lock of the expired leases and the writes acting on
        those whose ticks lie in the month of `now` or the one before, the writes' plan holding
        those months' partitions alone. Only when it locked a lease outside them (a row of no
        attempt says so) does the pass go on as two statements, the lock again and the
        writes with the locked rows bound (`ledger_expire_leases`), whose plan holds their months:
        the rows this transaction locked are its own, still running and locked again.
        """
        rows = self._fetch(reap_text(recent_months(now)),
                           {"now": now, "limit": limit, "free_requeues": FREE_LOST_REQUEUES})
        if any(r["attempt_id"] is None for r in rows):
            rows = [r for r in rows if r["attempt_id"] is not None]
            expired = self._rows("ledger_lock_expired_leases", {"now": now, "limit": limit})
            if expired:
                rows += self._rows("ledger_expire_leases", expire_params(now, expired))
        return ReapedLeases(
            lost=[FinishedAttempt(applied=True, attempt_id=r["attempt_id"], run_id=r["run_id"], number=r["number"],
                                  run_status=r["run_status"]) for r in rows if not r["requeued"]],
            requeued=[r["attempt_id"] for r in rows if r["requeued"]],
        )

    def queue_retries(
        self, runs: Sequence[tuple[int, datetime]], now: datetime, patient: Sequence[str] = ()
    ) -> list[LaunchedRetry]:
        """Queue the next attempt of every run (id, tick) still pending a retry, after its backoff for `patient` categories.

        The ticks name the runs' months, so the statement reads and writes only those partitions.
        """
        return self.submit_queue_retries(runs, now, patient)()

    def submit_queue_retries(
        self, runs: Sequence[tuple[int, datetime]], now: datetime, patient: Sequence[str] = ()
    ) -> Callable[[], list[LaunchedRetry]]:
        """`queue_retries`, sent now and read by the call returned (see `StoreBase._submit`).

        In pipeline mode the statement goes out with the transaction's next read, so a caller
        with more to read (the poller's evaluation) does not wait for it on its own.
        """
        if not runs:
            return list
        ticks = sorted({t for _, t in runs})
        read = self._submit_text(in_months("ledger_queue_retries", ticks),
                                 {"run_ids": BigintArray([r for r, _ in runs]),
                                  "run_scheduled_fors": TimestamptzArray(ticks), "now": now,
                                  "patient": TextArray(patient)})
        return lambda: [LaunchedRetry(**row) for row in read()]  # the statement returns exactly its fields

    def cancel_run(self, run_id: int, actor: str, now: datetime) -> Run | None:
        """Cancel a run that has no verdict yet, and its queued or running attempt; None if it has one."""
        row = self._row("ledger_cancel_run", {"run_id": run_id, "actor": actor, "now": now})
        return from_row(Run, row) if row else None

    def get_run(self, run_id: int, scheduled_for: datetime | None = None) -> Run | None:
        """The run by id; given its tick too (a caller holding the run), only its month is read."""
        if scheduled_for is None:
            row = self._row("ledger_get_run", {"run_id": run_id})
        else:
            row = self._row("ledger_get_run_in_month", {"run_id": run_id, "scheduled_for": scheduled_for})
        return from_row(Run, row) if row else None

    def get_run_for_tick(self, workflow_id: int, scheduled_for: datetime) -> Run | None:
        row = self._row("ledger_get_run_for_tick", {"workflow_id": workflow_id, "scheduled_for": scheduled_for})
        return from_row(Run, row) if row else None

    def list_runs(self, workflow_id: int, limit: int = 50, before: datetime | None = None) -> list[Run]:
        rows = self._rows("ledger_list_runs", {"workflow_id": workflow_id, "limit": limit, "before": before})
        return [from_row(Run, row) for row in rows]

    def list_attempts(self, run_id: int, scheduled_for: datetime | None = None) -> list[Attempt]:
        """A run's attempts; given its tick, only its month is read."""
        if scheduled_for is None:
            rows = self._rows("ledger_list_attempts", {"run_id": run_id})
        else:
            rows = self._rows("ledger_list_attempts_in_month", {"run_id": run_id, "scheduled_for": scheduled_for})
        return [from_row(Attempt, row) for row in rows]


def tick_params(groups: Sequence[TickGroup], now: datetime, advances: Sequence[Advance]) -> dict[str, Any]:
    """The parameters of the `create_tick_runs` statement: one array per group column, per tick and per advance."""
    tick_groups, scheduled_fors, deadlines = [], [], []
    for number, group in enumerate(groups, start=1):
        for scheduled_for, deadline_at in group.ticks:
            tick_groups.append(number)
            scheduled_fors.append(scheduled_for)
            deadlines.append(deadline_at)
    return {
        "workflow_ids": TextArray([g.workflow_ids for g in groups]),
        "tenant_ids": TextArray([g.tenant_ids for g in groups]),
        "retry_budgets": BigintArray([g.retry_budget for g in groups]),
        "retry_backoffs": TextArray([int_array_literal(g.retry_backoff_seconds) for g in groups]),
        "first_attempts": BigintArray([g.first_attempt for g in groups]),
        "tick_groups": BigintArray(tick_groups),
        "scheduled_fors": TimestamptzArray(scheduled_fors),
        "deadlines": TimestamptzArray(deadlines),
        "advance_ids": TextArray([a.schedule_ids for a in advances]),
        "advance_next": TimestamptzArray([a.next_fire_at for a in advances]),
        "advance_last": TimestamptzArray([a.last_fired_at for a in advances]),
        "now": now,
    }


def lease_statements(worker_id: str, now: datetime, lease_seconds: float, limit: int, *,
                     start: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The lease, the one path every worker (and the simulated one) takes: its two statements, in order.

    `ledger_lease_queue` locks up to `limit` due queue rows (SKIP LOCKED) and tells the next
    statement which, inside the server; `ledger_lease_attempts` leases them. Neither waits for
    the other's rows at the client, so both go out in one round trip; they must run in one
    transaction, the second right after the first. `start`: how many of the leased attempts
    (oldest first) start now; the others are leased ahead, to be started later by their
    worker's compare-and-set. Default: all.
    """
    params = {"worker_id": worker_id, "now": now, "lease_expires_at": now + timedelta(seconds=lease_seconds),
              "limit": limit, "start": limit if start is None else start}
    return [("ledger_lease_queue", params), ("ledger_lease_attempts", params)]


# What `reap_text` replaces in `ledger_expire_leases` (compacted, as `queries()` holds it).
_BOUND_EXPIRED = ("WITH expired AS (\nSELECT * FROM unnest(%(attempt_ids)s::bigint[], %(run_scheduled_fors)b::timestamptz[],"
                  " %(aheads)s::boolean[])\nAS e (id, run_scheduled_for, ahead)\n)")
_BOUND_TICKS = "= ANY (%(run_scheduled_fors)b::timestamptz[])"


@functools.lru_cache(maxsize=4)
def reap_text(months: tuple[tuple[int, int], tuple[int, int]]) -> str:
    """The reaper's pass in one statement: `ledger_lock_expired_leases`, then `ledger_expire_leases` on what it locked.

    The writes are `ledger_expire_leases`' own, word for word, with their `expired` the locked
    rows whose ticks lie in `months` and their ticks those months as constants (`month_bounds`),
    so their plan holds those months' partitions alone, as with the locked rows bound, and the
    server keeps one plan a month. The rows are the writes' and, when the lock took a lease
    outside the months (left locked, for the caller's writes with it bound), one more, all NULL.
    The pass waits for the server once instead of twice: for the lock's rows, then for the writes'.
    """
    lock = queries()["ledger_lock_expired_leases"].removesuffix(";")
    expire = queries()["ledger_expire_leases"].removesuffix(";")
    bounds = month_bounds(*months)
    if expire.count(_BOUND_EXPIRED) != 1 or expire.count(_BOUND_TICKS) != 5:
        raise AssertionError("ledger_expire_leases changed: reap_text must be told what to replace")
    text = (expire.replace(_BOUND_EXPIRED, f"WITH locked AS (\n{lock}\n), expired AS (\n"
                                           f"SELECT * FROM locked WHERE run_scheduled_for {bounds}\n)")
            .replace(_BOUND_TICKS, bounds))
    return (f"{text}\nUNION ALL\nSELECT NULL, NULL, NULL, NULL, NULL"
            f" FROM (SELECT 1 FROM locked WHERE NOT (run_scheduled_for {bounds}) LIMIT 1) outside;")


def expire_params(now: datetime, expired: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The parameters of `expire_leases`, with the rows `lock_expired_leases` locked."""
    return {"now": now, "free_requeues": FREE_LOST_REQUEUES, "attempt_ids": BigintArray([e["id"] for e in expired]),
            "run_scheduled_fors": TimestamptzArray([e["run_scheduled_for"] for e in expired]),
            "aheads": [e["ahead"] for e in expired]}


def leased_from_rows(rows: Sequence[Sequence[Any]]) -> list[tuple[Attempt, datetime]]:
    """Each leased attempt with its run's tick, from the rows of `ledger_lease_attempts` read as tuples:
    `Attempt`'s fields in order (`record_builder`; a simulated day leases some 15,000 attempts)."""
    return [(attempt, attempt.run_scheduled_for) for attempt in record_builder(Attempt)(rows)]


def finished_from_rows(finished: Sequence[tuple[Attempt, AttemptOutcome, datetime]],
                       rows: list[dict[str, Any]]) -> list[FinishedAttempt]:
    """What recording each outcome did, in the order given: an attempt with no row did not apply."""
    by_id = {r["attempt_id"]: r for r in rows}
    results = []
    for attempt, _, _ in finished:
        row = by_id.get(attempt.id)
        if row is None:
            results.append(FinishedAttempt(applied=False, attempt_id=attempt.id))
        else:
            results.append(FinishedAttempt(applied=True, attempt_id=attempt.id, run_id=row["run_id"],
                                           number=row["number"], run_status=row["run_status"]))
    return results


def finish_text(finished: Sequence[tuple[Attempt, AttemptOutcome, datetime]], *, wake: bool = True,
                steps: bool = True) -> str:
    """The text of `ledger_finish_attempts` for these attempts: its `{months}` theirs (`in_months`; not empty).

    One outcome reads its one object and finds its attempt by its key (see the statement's
    `{reported}` and `{running}`); a batch reads the array. The parameters are the same
    (`finish_params`): one JSON array either way.

    `wake` and `steps` say whether its parameters (`finish_params`) wake the poller and carry
    steps' rows: without them the text leaves out the CTE that would notify (`woken`) or insert
    the steps (`stepped`), which would do nothing. A data-modifying CTE is set up and run at
    every execution, rows or none (an insert into the partitioned steps, the steps' JSON read, a
    hash of the attempts finished): the worker's exchange never wakes in it (it wakes the poller
    after its commit), and the simulator writes no steps.
    """
    return _finish_text(in_months("ledger_finish_attempts", [attempt.run_scheduled_for for attempt, _, _ in finished]),
                        len(finished) == 1, wake, steps)


# What `_finish_text` cuts from `ledger_finish_attempts` (compacted, as `queries()` holds it).
_STEPPED, _MOVED = "\n), stepped AS (\n", "\n), moved AS (\n"
_WOKEN, _WOKEN_END, _WOKEN_JOIN = "\n), woken AS (\n", "\n)\nSELECT done.id", "\nCROSS JOIN (SELECT count(*) FROM woken) w"


@functools.lru_cache(maxsize=64)
def _finish_text(text: str, one: bool, wake: bool = True, steps: bool = True) -> str:
    if not steps or not wake:
        if any(text.count(part) != 1 for part in (_STEPPED, _MOVED, _WOKEN, _WOKEN_END, _WOKEN_JOIN)):
            raise AssertionError("ledger_finish_attempts changed: _finish_text must be told what to cut")
        if not steps:
            text = text[:text.index(_STEPPED)] + text[text.index(_MOVED):]
        if not wake:
            text = (text[:text.index(_WOKEN)] + text[text.index(_WOKEN_END):]).replace(_WOKEN_JOIN, "")
    if one:
        return text.replace("{reported}", "jsonb_to_record(%(outcomes)s::jsonb -> 0)").replace(
            "{running}", "IS NOT DISTINCT FROM 'running'")
    return text.replace("{reported}", "jsonb_to_recordset(%(outcomes)s::jsonb)").replace("{running}", "= 'running'")


def finish_params(worker_id: str, finished: Sequence[tuple[Attempt, AttemptOutcome, datetime]], *,
                  wake: bool = True, steps: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The parameters of the `finish_attempts` statement: one JSON object per attempt, each with its run's tick.

    `wake`: the statement notifies the poller as it commits; False only for a caller that
    sends the wake itself once the outcome has committed (the worker's exchange).
    `steps`: the rows of `attempt_steps` to write with the outcomes, each naming its `attempt_id`.
    """
    for _, outcome, _ in finished:
        if outcome.status not in ("succeeded", "failed"):
            raise ValueError(f"an attempt finishes as succeeded or failed, not {outcome.status!r}")
    # One JSON array of outcomes, not an array per column: a dozen arrays cost the client more to
    # dump than the statement's whole exchange. Timestamps travel as ISO text, exact to the microsecond.
    return {
        "worker_id": worker_id,
        "outcomes": Jsonb([{
            "attempt_id": attempt.id, "run_scheduled_for": attempt.run_scheduled_for.isoformat(),
            "workflow_id": attempt.workflow_id, "status": outcome.status, "finished_at": at.isoformat(),
            "error_category": outcome.error_category, "error": outcome.error, "failed_step": outcome.failed_step,
            "retryable": outcome.retryable, "log_tail": outcome.log_tail, "outputs": outcome.outputs,
            "rows": outcome.rows,
        } for attempt, outcome, at in finished]),
        "wake": wake,
        "steps": Jsonb(list(steps)),
    }
