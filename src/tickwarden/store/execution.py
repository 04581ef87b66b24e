"""Execution operations: attempt steps, released leases and environment instances."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from tickwarden.models import (
    Attempt, AttemptOutcome, Environment, EnvironmentInstance, FinishedAttempt, User, Workflow, from_row,
)
from tickwarden.store.base import StoreBase
from tickwarden.store.ledger import (
    finish_params, finish_text, finished_from_rows, in_months, lease_statements, leased_from_rows,
)

# The session setting of `Database(generic_plans=True)`'s connections: a worker process's pool.
GENERIC_PLANS = "plan_cache_mode=force_generic_plan"
_GENERIC_PLANS_BYTES = GENERIC_PLANS.encode()


@dataclass(frozen=True)
class ExecutionContext:
    """What a worker needs to run an attempt: the workflow, its cadence, publisher and environment."""

    workflow: Workflow
    cadence_seconds: int | None
    publisher: User | None
    environment: Environment | None
    tenant_name: str | None = None  # the run key's tenant part, so a run needing no secret needs no second look


# An environment instance's mark: (row id, status, runs served).
InstanceMark = tuple[int, str, int]


@dataclass(frozen=True)
class LeaseMark:
    """The mark of a process whose status depends on the attempt the exchange's lease locks first.

    Decided in the server, in the lease's own round trip (`execution_update_environment_instance`
    with `keeping`): busy when that attempt's workflow is one of `keeping` (the process serves it
    next), else warm; busy with `stands` (its row busy and written recently) writes nothing.
    `mark` is the warm mark (row id, "warm", runs served) the status replaces. `decided` is
    given the status the server wrote (None: it wrote nothing) once the exchange returns, so
    the caller records what was written without deciding it again.
    """

    mark: InstanceMark
    keeping: list[int]
    stands: bool
    decided: Callable[[str | None], object]


@dataclass(frozen=True)
class Exchanged:
    """What one exchange did: the outcome's recording, whether the attempt leased ahead started,
    and the attempts leased with their contexts by workflow (the first started, the others leased ahead)."""

    finished: FinishedAttempt | None
    leased: list[tuple[Attempt, datetime]]
    contexts: dict[int, ExecutionContext]
    started: bool = False


def _mark(instance: InstanceMark, now: datetime, lease: LeaseMark | None = None) -> tuple[str, dict[str, Any]]:
    instance_id, status, served = instance
    return ("execution_update_environment_instance", {
        "instance_id": instance_id, "status": status, "now": now, "pid": None, "served": served, "relaxed": False,
        "keeping": lease.keeping if lease is not None else None, "stands": lease is not None and lease.stands})


def _prefixed(columns: list[str], prefix: str) -> list[tuple[str, str]]:
    """The columns of a joined row under `prefix`, each with its name without it."""
    return [(column, column[len(prefix):]) for column in columns if column.startswith(prefix)]


def _joined(row: dict[str, Any], columns: list[tuple[str, str]]) -> dict[str, Any] | None:
    """The joined row's columns (`_prefixed`) by their own names; None when the join found no row."""
    found = {name: row[column] for column, name in columns}
    return found if found.get("id") is not None else None


class ExecutionRepository(StoreBase):
    def context(self, workflow_id: int, now: datetime) -> ExecutionContext | None:
        """Load a workflow with what running it needs; a workflow without environment gets `default`."""
        return self._contexts(self._rows("execution_contexts", {"workflow_ids": [workflow_id]}),
                              now).get(workflow_id)

    def _contexts(self, rows: list[dict[str, Any]], now: datetime) -> dict[int, ExecutionContext]:
        contexts: dict[int, ExecutionContext] = {}
        if not rows:
            return contexts
        # Every row has the same columns: split them once, not at every row (a batch's lease reads several).
        publishers, environments = _prefixed(list(rows[0]), "publisher__"), _prefixed(list(rows[0]), "environment__")
        for row in rows:
            publisher = _joined(row, publishers)
            environment = _joined(row, environments)
            workflow = from_row(Workflow, row)
            env = from_row(Environment, environment) if environment else None
            if env is None and workflow.environment_id is None:
                env = self.ensure_default_environment(workflow.tenant_id, now)
            contexts[workflow.id] = ExecutionContext(
                workflow=workflow,
                cadence_seconds=row["schedule__cadence_seconds"],
                publisher=from_row(User, publisher) if publisher else None,
                environment=env,
                tenant_name=row["tenant__name"],
            )
        return contexts

    def exchange(
        self, worker_id: str, now: datetime, lease_seconds: float, *, attempt: Attempt | None = None,
        outcome: AttemptOutcome | None = None, steps: Sequence[dict[str, Any]] = (),
        instance: InstanceMark | LeaseMark | None = None,
        start: Attempt | None = None, lease: int = 0, finished_at: datetime | None = None,
    ) -> Exchanged:
        """A worker's writes between two attempts, sent together and committed together.

        One round trip, with a lease too. Only on a connection in autocommit
        (`Database.autocommit`). In order: record the `outcome` of `attempt`, finished at
        `finished_at` (default `now`; `ledger_finish_attempts`, the compare-and-set that
        applies a result once), with its `steps` rows in the same statement; move the environment `instance` (id,
        status, runs served), unless it is a `LeaseMark`, decided by the lease; start the
        attempt leased ahead `start` on a full lease from `now` (a compare-and-set: `started` says whether this worker still held it); lock up
        to `lease` queued attempts and lease them (`ledger.lease_statements`, the one lease
        path), the first started now and the others leased ahead, load their
        workflows' contexts and write a `LeaseMark` as the first of them decides.
        That commit waits for the WAL flush: it records an outcome or starts an attempt.
        After it, with an outcome, a second transaction in the same round trip wakes the
        poller (`execution_wake_poller`: not waiting for the flush, and keeping the server's
        notification lock out of the durable commit, which would otherwise serialise every
        worker's outcomes).
        """
        with self._prepared_at_first_use():
            return self._exchanged(worker_id, now, lease_seconds, attempt=attempt, outcome=outcome, steps=steps,
                                   instance=instance, start=start, lease=lease, finished_at=finished_at)

    @contextlib.contextmanager
    def _prepared_at_first_use(self) -> Iterator[None]:
        """Have psycopg prepare the exchange's statements at their first use on this connection, not their fifth.

        They run as plans made once per connection (`execution_generic_plans`), but a statement
        not prepared yet has its generic plan made afresh at each execution and thrown away: on
        every new connection (each new worker process's), psycopg's first four executions of
        each paid a whole plan over every month the ledger keeps (with 16 months about 8 ms for
        the outcome's statement and 6 ms for the lease's, several attempts' worth of work).
        A connection that prepares nothing (`prepare_threshold` None) is left as it is.
        """
        conn = self.conn
        threshold = conn.prepare_threshold
        if threshold is None or threshold <= 0:
            yield
            return
        conn.prepare_threshold = 0
        try:
            yield
        finally:
            conn.prepare_threshold = threshold

    def _exchanged(
        self, worker_id: str, now: datetime, lease_seconds: float, *, attempt: Attempt | None,
        outcome: AttemptOutcome | None, steps: Sequence[dict[str, Any]],
        instance: InstanceMark | LeaseMark | None,
        start: Attempt | None, lease: int, finished_at: datetime | None,
    ) -> Exchanged:
        finished = ([(attempt, outcome, finished_at or now)] if attempt is not None and outcome is not None
                    else [])
        # With an outcome or a lease the durable part is an explicit BEGIN … COMMIT: the wake
        # after an outcome has a transaction of its own (a COMMIT without BEGIN would end the
        # pipeline's implicit one too, but the server warns of it in its log at every attempt).
        # Its statements then run plans made once per connection (`execution_generic_plans`).
        # A connection whose session runs generic plans already (a worker process's pool) needs no
        # setting for them: one statement fewer at every exchange.
        opening: list[tuple[str, dict[str, Any]]] = [("execution_begin", {})]
        if not _generic_session(self.conn):
            opening.append(("execution_generic_plans", {}))
        begun = len(opening) if finished or lease else 0
        statements = opening[:begun]
        if attempt is not None and finished:
            statements.append((finish_text(finished, wake=False, steps=bool(steps)), finish_params(
                worker_id, finished, wake=False, steps=[{**step, "attempt_id": attempt.id} for step in steps])))
        # A mark decided by the attempt the lease locks first is written behind the lease; without a
        # lease, it is decided on none (warm, as `LeaseMark.decided` then records it).
        decide = instance if isinstance(instance, LeaseMark) else None
        if decide is not None and not lease:
            decide.decided(decide.mark[1])  # nothing leased: the warm mark, written below
            instance, decide = decide.mark, None
        if instance is not None and not isinstance(instance, LeaseMark):
            statements.append(_mark(instance, now))
        if start is not None:
            statements.append(_start(start, worker_id, now, lease_seconds))
        started_at = len(statements) - 1
        leasing = len(statements)
        tuples: tuple[str, ...] = ()
        if lease:
            # The queue's rows are locked and leased in this same round trip: the writes are told
            # the rows and their months by the lock, inside the server (`ledger_lease_queue`).
            lock, write = lease_statements(worker_id, now, lease_seconds, lease, start=1)
            tuples = (write[0],)  # the lease's rows, read by position (`leased_from_rows`)
            statements += [lock, write,
                           ("execution_contexts", {"workflow_ids": None}),
                           *([_mark(decide.mark, now, decide)] if decide is not None else [])]
        ending: list[tuple[str, dict[str, Any]]] = (
            [("execution_commit", {}), ("execution_wake_poller", {})] if finished
            else [("execution_commit", {})] if lease else [])
        try:
            results = self._exchange(statements + ending, tuples=tuples)
        except BaseException:
            if begun and not self.conn.closed and self.conn.info.transaction_status != TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    self.conn.rollback()
            raise
        leased: list[tuple[Attempt, datetime]] = []
        contexts: dict[int, ExecutionContext] = {}
        if lease:
            queued = results[leasing]
            leased = leased_from_rows(results[leasing + 1]) if queued else []
            contexts = self._contexts(results[leasing + 2], now) if leased else {}
            if decide is not None:
                marked = results[leasing + 3]
                decide.decided(marked[0]["status"] if marked else None)
        return Exchanged(finished_from_rows(finished, results[begun])[0] if finished else None, leased, contexts,
                         started=start is not None and bool(results[started_at]))

    def queue_waiting(self, now: datetime) -> bool:
        """Whether an attempt is queued and due at `now` (a hint: a lease may still find it taken)."""
        row = self._row("execution_queue_waiting", {"now": now})
        return bool(row and row["found"])

    def start_attempt(self, attempt: Attempt, worker_id: str, now: datetime, lease_seconds: float) -> bool:
        """Start an attempt this worker leased ahead, on a full lease from `now`.

        False when the worker no longer holds that lease (given back, or expired and given
        back by the reaper, perhaps leased since by another worker) or it was started already:
        the worker must then not run it.
        """
        return bool(self._fetch(*_start(attempt, worker_id, now, lease_seconds)))

    def ensure_default_environment(self, tenant_id: int, now: datetime) -> Environment:
        """Return the tenant's `default` environment, creating it once."""
        row = self._row("execution_ensure_default_environment", {"tenant_id": tenant_id, "now": now})
        assert row is not None
        return from_row(Environment, row)

    def release_attempt(self, attempt: Attempt, worker_id: str) -> bool:
        """Put a leased attempt back in the queue; False when this worker no longer held it."""
        return bool(self.release_attempts([attempt], worker_id))

    def release_attempts(self, attempts: Sequence[Attempt], worker_id: str) -> list[int]:
        """Put leased attempts back in the queue; return the ids of those this worker still held."""
        if not attempts:
            return []
        rows = self._rows("execution_release_attempts", {
            "attempt_ids": [a.id for a in attempts], "run_scheduled_fors": [a.run_scheduled_for for a in attempts],
            "worker_id": worker_id})
        return [r["id"] for r in rows]

    def start_environment_instance(
        self, *, tenant_id: int, environment_id: int, worker_id: str, pid: int | None, status: str, now: datetime
    ) -> EnvironmentInstance:
        row = self._row(
            "execution_start_environment_instance",
            {"tenant_id": tenant_id, "environment_id": environment_id, "worker_id": worker_id, "pid": pid,
             "status": status, "now": now},
        )
        assert row is not None
        return from_row(EnvironmentInstance, row)

    def update_environment_instance(
        self, instance_id: int, status: str, now: datetime, *, pid: int | None = None, served: int = 0,
        relaxed: bool = False,
    ) -> EnvironmentInstance | None:
        """Move an instance to `status`; `relaxed` only on a statement that is its own transaction."""
        row = self._row(
            "execution_update_environment_instance",
            {"instance_id": instance_id, "status": status, "now": now, "pid": pid, "served": served,
             "relaxed": relaxed, "keeping": None, "stands": False},
        )
        return from_row(EnvironmentInstance, row) if row else None

    def abandon_environment_instances(self, now: datetime, grace_seconds: int = 300) -> int:
        """Mark dead the idle instances whose worker vanished without stopping them; return how many."""
        return len(self._rows("execution_abandon_environment_instances", {"now": now, "grace_seconds": grace_seconds}))

    def send_abandon_environment_instances(self, now: datetime, grace_seconds: int = 300) -> None:
        """`abandon_environment_instances`, sent and not read, for a caller that needs no count.

        The same statement, so the same state change. On a pipelined connection (the
        simulator's) it goes out with the next statement read, the transaction's COMMIT
        at the latest, at no round trip of its own, and still runs after every statement
        sent before it; an error it raises fails the transaction there. Elsewhere it is a
        round trip as before.
        """
        self._send("execution_abandon_environment_instances", {"now": now, "grace_seconds": grace_seconds})

    def reaper_server_started(self) -> datetime:
        """When the database server last started."""
        row = self._row("execution_reaper_server_started", {})
        assert row is not None
        started: datetime = row["started"]
        return started

    def reaper_waiting(self, now: datetime, grace_seconds: int = 300) -> bool:
        """Whether a lease reaper pass would find an expired lease or an abandoned instance."""
        row = self._row("execution_reaper_waiting", {"now": now, "grace_seconds": grace_seconds})
        return bool(row and row["found"])

    def send_generic_plans(self) -> None:
        """Have the rest of the caller's transaction run plans made once per connection (generic).

        `execution_generic_plans`, sent and not read: in a pipelined transaction it goes out
        with the transaction's next read (the poller's claim, after its BEGIN), no round trip
        of its own. Nothing is sent on a connection whose session runs generic plans from its
        start (a worker process's pool, the simulator's connection): it would change nothing.
        """
        if not _generic_session(self.conn):
            self._send("execution_generic_plans")

    def list_environment_instances(self, *, include_stopped: bool = False, limit: int = 200) -> list[EnvironmentInstance]:
        rows = self._rows("execution_list_environment_instances", {"include_stopped": include_stopped, "limit": limit})
        return [from_row(EnvironmentInstance, r) for r in rows]


def _generic_session(conn: psycopg.Connection[Any]) -> bool:
    """Whether `conn`'s session runs generic plans from its start (`GENERIC_PLANS` among its options).

    Read from libpq's own bytes (ASCII, as the setting is): `conn.info.options` makes a
    `ConnectionInfo` and decodes them at every exchange.
    """
    return _GENERIC_PLANS_BYTES in conn.pgconn.options


def _start(attempt: Attempt, worker_id: str, now: datetime, lease_seconds: float) -> tuple[str, dict[str, Any]]:
    """`execution_start_attempt` for `attempt`: its text with the attempt's month (`in_months`), its parameters."""
    return in_months("execution_start_attempt", [attempt.run_scheduled_for]), {
        "attempt_id": attempt.id, "run_scheduled_for": attempt.run_scheduled_for, "worker_id": worker_id, "now": now,
        "lease_expires_at": now + timedelta(seconds=lease_seconds)}
