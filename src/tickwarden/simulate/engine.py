"""The discrete-event simulator: the service's own passes on a virtual clock.

A simulation runs on a fresh schema of the configured database. It sets the
scenario's tenants and workflows up through the store, then drives the very same
loop objects the service runs — ticker, lease reaper, outcome poller,
deadline detector, escalation clock, notifier — each at the wake-up time its
previous pass returned. Only execution is simulated: a `SimulatedWorker` leases
attempts through the real ledger and finishes them when the scenario says they
end (fault windows, crashes, durations). Same input, same output.

Events at the same instant run in a fixed order: what happened in the world first
(attempts ending, manual runs), then the control plane in pipeline order.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import gc
import heapq
import itertools
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tickwarden import maintenance
from tickwarden.cadence import cadence_of, parse_schedule
from tickwarden.catalog import Budget, Publication, budget_for, publish_all
from tickwarden.categories import categorize
from tickwarden.clock import VirtualClock
from tickwarden.db import Database, DedicatedDatabase
from tickwarden.migrate import upgrade
from tickwarden.models import Attempt, AttemptOutcome
from tickwarden.profile import default_timeout_seconds, derive_profile
from tickwarden.sanitize import sanitize_error
from tickwarden.store.ledger import finish_params, finish_text
from tickwarden.store.queries import queries
from tickwarden.simulate.simulation import SimulationRepository, renew_params
from tickwarden.errors import TickwardenError
from tickwarden.simulate.scenario import Checkin, Fault, Scenario

log = logging.getLogger(__name__)

# Order of events that fall on the same instant.
ORDER = {
    "world": 0,
    "ticker": 2,
    "worker": 3,
    "lease-reaper": 4,
    "poller": 5,
    "deadlines": 6,
    "escalation": 7,
    "notifier": 8,
    "heartbeat": 9,
    "autovacuum": 10,
}
# Passes that read what the worker writes (attempt outcomes, lease renewals) and so
# must see the worker's buffered writes first (the lease reaper: see SimulatedWorker).
# The others read neither: the ticker inserts runs by tick, the worker's lease takes
# queued attempts (which outcomes and renewals never create), the escalation clock reads alerts, and the notifier reads alert events and
# the attempts of runs the poller already judged (so written).
SEES_WORKER = frozenset({"poller", "deadlines"})
# Passes that read attempts' leases, and only where one has run out (`lease_expires_at <= now`):
# a renewal is written for them alone (see SimulatedWorker.flush). The deadline detector reads
# a lease only for a run past its deadline (`monitoring_lock_overdue_and_arm`).
READS_LEASES = frozenset({"deadlines", "lease-reaper"})
WORKER_ID = "simulated-worker"
APPLICATION_NAME = "tickwarden-sim"  # the simulation's connection, as the server lists it
# Loops whose look is sent as soon as something leaves them stale, unread, so that it goes
# out with the next statement read and is answered by the time the loop wakes (their looks
# are most of the simulator's: each pass of theirs leaves one stale; an alert the poller or
# the deadline detector opens or counts up does not, its evaluation says when it could first
# escalate). The look then reads the ledger as it was when the
# loop went stale, not when it wakes: any write in between that could bring its work
# forward touches the loop (`IdlePasses.touch`) and voids the look, and any other write
# can only push its work back, so the earlier answer is a lower bound all the same.
EARLY_LOOKS = ("escalation", "notifier")
# Rows an undisturbed attempt of a workflow that expects rows reports: the simulator
# models whether records arrived, not how many (a `mode: empty` fault reports zero).
SIMULATED_ROWS = 1
# The control plane comes up this long after the scenario starts, so that its passes
# are not in lockstep with the round times faults are usually written at.
CONTROL_PLANE_OFFSET = timedelta(seconds=15)
LEASE_SECONDS = 60
LEASE = timedelta(seconds=LEASE_SECONDS)
WORKER_POLL_SECONDS = 60  # the simulated worker is also woken whenever attempts are queued
# Spans added at every pass, heartbeat or lease, made once: a `timedelta` built from keywords
# parses them at each construction, some 13,000 times a simulated day of 300 workflows.
WORKER_POLL = timedelta(seconds=WORKER_POLL_SECONDS)
HEARTBEAT = timedelta(seconds=LEASE_SECONDS / 3)  # the real worker renews its lease three times a lease
ONE_MILLISECOND = timedelta(milliseconds=1)  # the least a loop's next pass comes after its last
LEASE_LIMIT = 10_000  # attempts the simulated worker leases at once
# Successes the simulator lets wait in the outcome queue at most, unclaimed (see `Quiet`).
QUIET_LIMIT = 32
# Container allocations between two collections of the youngest generation while a simulation
# runs (`fewer_collections`), instead of the collector's default of 700.
YOUNG_COLLECTION_EVERY = 10_000




_collections_lock = threading.Lock()
_collections_held = 0  # simulations running in this process (see `fewer_collections`)
_collections_saved: tuple[int, int, int] = (700, 10, 10)


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect the youngest generation every YOUNG_COLLECTION_EVERY allocations while the block runs.

    A simulated day allocates millions of short-lived containers (parameters, rows, events)
    that reference counting frees, and with the default threshold some 400 young and a few
    full collections walked what survived them (the scenario, the loops, the modules): 4 %
    of the client's CPU. With a threshold this large most of them are freed before any
    collection sees them; reference cycles are still collected, only less often. The
    thresholds are the process's: the first simulation to start raises the young one, the
    last to end puts back what it found.
    """
    global _collections_held, _collections_saved
    with _collections_lock:
        if _collections_held == 0:
            _collections_saved = gc.get_threshold()
            young, *older = _collections_saved
            gc.set_threshold(max(young, YOUNG_COLLECTION_EVERY), *older)
        _collections_held += 1
    try:
        yield
    finally:
        with _collections_lock:
            _collections_held -= 1
            if _collections_held == 0:
                gc.set_threshold(*_collections_saved)


class IdlePasses:
    """Which passes would find nothing to do, so that the simulator need not run them.

    Each loop passes on its own interval and in the service that is what it does. But
    a pass that finds no work writes nothing and wakes nobody: all it does is return
    `now + interval` (the ticker and the notifier: no later than their next due entry).
    So a chain of such passes can be skipped as long as the ledger proves each would be
    idle, and the loop woken at the first instant of that same chain at which its work
    could be due: the passes that do work fall at the very instants, in the same order,
    and see the very ledger they would have without skipping, so every outcome and
    every timestamp is the same.

    Per loop, `due` is a lower bound of the first instant its look could match a row.
    It comes from the ledger (`simulation_next_due_*`, one index probe, read only when the loop
    is due to pass, its bound is past, and something it cannot account for was written
    since: `stale`), or is lowered exactly by what the simulator knows it wrote (a retry
    is queued for its backoff's end; a pass that woke a loop makes it due now). The lease
    reaper's is never read: the simulated worker took every lease and knows when the
    first one left to run out does (`SimulatedWorker.next_expiry`; a crash lowers it). Either kind of write also pulls a loop whose wake-up
    was pushed ahead back to the next instant of its chain after the write, where the
    decision is taken again.
    """

    def __init__(self, start: datetime, end: datetime, loops: dict[str, tuple[timedelta, bool]]):
        self.never = end + timedelta(days=1)  # nothing due within the run
        # name -> (interval of its idle passes, whether an idle pass returns no later than its next due entry)
        self.loops = loops
        self.due: dict[str, datetime] = {name: start for name in loops}  # every loop's first pass runs
        self.cap: dict[str, datetime] = {}
        self._stale: set[str] = set()
        # name -> how many times something may have changed its work: a look sent ahead of
        # time (`submit_look`) answers for the ledger only while this has not moved
        self.changes: collections.Counter[str] = collections.Counter()
        # name -> (the idle pass it jumped from, where it jumped to, the cap of its chain)
        self.jumped: dict[str, tuple[datetime, datetime, datetime | None]] = {}
        self.looks: collections.Counter[str] = collections.Counter()  # loop name -> looks at the ledger
        self.skipped = 0

    def must_look(self, name: str, now: datetime) -> bool:
        """Whether the ledger must be read to decide: the bound is not past and something unknown was written."""
        return self.due[name] > now and name in self._stale

    def stale(self, name: str) -> bool:
        """Whether the loop's next decision needs a look (unless its bound is past by then)."""
        return name in self._stale

    def looked(self, name: str, due: datetime | None, cap: datetime | None, *, counted: bool = True) -> None:
        """What the look read (`counted=False`: what a real pass read with the look's own query)."""
        self.due[name] = due or self.never
        self.cap[name] = cap or self.never
        self._stale.discard(name)
        self.looks[name] += counted

    def passed(self, name: str, due: datetime | None = None) -> None:
        """A real pass consumed the loop's own work: what is left is due at `due`, or must be read."""
        self.changes[name] += 1
        if due is None:
            self.due[name] = self.never
            self._stale.add(name)
        else:
            self.due[name] = due
            self._stale.discard(name)

    def jump(self, name: str, now: datetime) -> datetime:
        """Skip the idle pass at `now`: where its chain of idle passes first reaches the loop's due."""
        interval, capped = self.loops[name]
        steps = -((now - self.due[name]) // interval)  # ceil((due - now) / interval) >= 1
        target = now + steps * interval
        cap = self.cap.get(name, self.never) if capped else None
        if cap is not None and cap < target:
            target = cap
        self.jumped[name] = (now, target, cap)
        self.skipped += 1
        return target

    def touch(self, name: str, now: datetime, order: int, due: datetime | None = None) -> datetime | None:
        """Something written at `now` may bring `name`'s work forward (to `due`, when known).

        Returns where to pull the loop's pushed-ahead wake-up back to, if anywhere.
        """
        self.changes[name] += 1
        if due is None:
            self._stale.add(name)
        else:
            self.due[name] = min(self.due[name], due)
        jumped = self.jumped.get(name)
        if jumped is None:
            return None
        origin, target, cap = jumped
        interval = self.loops[name][0]
        point = origin + max(1, -((origin - now) // interval)) * interval  # the chain's first instant >= now
        if point == now and ORDER[name] <= order:
            point += interval  # its pass at `now` came before this write
        if cap is not None and cap < point:
            point = cap
        if point >= target:
            return None
        del self.jumped[name]
        return point


class Quiet:
    """Which finished successes need not wake the poller: their claim alone would change nothing.

    The poller claims a success and does nothing more with it unless its workflow has an
    open alert to resolve (`alert_open`). Alerts open and resolve only in poller and
    deadline passes, and those report it (`EvaluationReport.opened`, `resolved`): after
    such a pass the workflows with an open alert are read again, sent unread so that the
    read goes out with the next pass's statements, and read after that pass. Until then
    every success wakes the poller as before.

    The claim they ride with must take what it would have taken without them: it is full
    (`batch_size`) only if they filled it. The outcomes a pass can find besides them are
    those of attempts in flight or crashed when they were left waiting, or leased since:
    successes wait only while those together stay below the batch, and a lease that
    crowds them has them claimed at once (`crowded`).

    A deadline pass does not claim them first (that was a round trip at half the deadline
    passes of a day): it never reads the outcome queue, and its evaluation reads the ledger,
    in which a waiting success is already its run's verdict, so it decides what it would
    have decided after their claim. What it can change is the alert state their claim then
    reads: a success of a workflow on which it opened an alert reads the alert open, and the
    poller evaluates that workflow. That evaluation decides nothing: the workflow's history
    is the one the deadline pass judged (the waiting success is older than any outcome of
    the workflow still to come, every one of which the same claim takes, and a later
    verdict's own pass evaluates it first), its failures are the alert's count, and a
    decision that changes nothing writes nothing.
    """

    def __init__(self, enabled: bool, worker: SimulatedWorker, batch_size: int):
        self.enabled = enabled
        self.worker = worker
        self.batch_size = batch_size
        self.waiting = 0  # successes left unclaimed since the poller's last pass
        self.excluded: set[int] = set()  # workflows whose successes always wake the poller
        self.open_alerts: set[int] = set()  # workflows with an open alert, as last read
        self._reading: Callable[[], set[int]] | None = None  # a read of them sent and not yet read

    def wait(self, workflow_id: int) -> bool:
        """Whether a success of this workflow, finished now, may wait for the poller's next pass (counted if so)."""
        if (not self.enabled or self._reading is not None or self.waiting >= QUIET_LIMIT
                or workflow_id in self.open_alerts or workflow_id in self.excluded
                # `_unclaimed`, inlined: every attempt that ends asks
                or self.waiting + 1 + len(self.worker.in_flight) + len(self.worker.crashed) >= self.batch_size):
            return False
        self.waiting += 1
        return True

    def crowded(self) -> bool:
        """Whether successes wait while the attempts that may yet end could fill a batch with them."""
        return self.waiting > 0 and self.waiting + self._unclaimed() >= self.batch_size

    def _unclaimed(self) -> int:
        """Attempts whose outcome may reach the outcome queue before the poller's next pass: in flight or crashed."""
        return len(self.worker.in_flight) + len(self.worker.crashed)

    def passed(self, db: Database, name: str, loop: Any) -> None:
        """After a real pass of loop `name`: what it claimed, and whether it moved an alert."""
        if not self.enabled:
            return
        if self._reading is not None:  # sent before this pass, answered with its statements
            self.open_alerts, self._reading = self._reading(), None
        if name == "poller":
            if self.waiting and loop.last.claimed >= loop.batch_size:
                raise AssertionError("successes left waiting filled the poller's batch: the simulation "
                                     "would no longer be the service's")
            self.waiting = 0  # the claim walks from the oldest outcome: theirs came first
        if name in ("poller", "deadlines") and (loop.last.evaluation.opened or loop.last.evaluation.resolved):
            with db.probe() as store:
                self._reading = SimulationRepository(store.conn).submit_open_alert_workflows()


@dataclass(frozen=True)
class Plan:
    """How one attempt will end: when, and with what outcome (None = the worker crashes)."""

    at: datetime
    outcome: AttemptOutcome | None


class OutcomeModel(Protocol):
    def plan(self, workflow: str, attempt: Attempt, scheduled_for: datetime, start: datetime) -> Plan:
        """Decide how an attempt of `workflow` started at `start` ends."""


class FaultWindowModel:
    """Outcomes from a scenario: attempts overlapping a fault window fail; others take their duration."""

    def __init__(self, scenario: Scenario, timeouts: dict[str, int]):
        self.durations = {spec.key: spec.duration for spec in scenario.workflows}
        self.expect_rows = {spec.key for spec in scenario.workflows if spec.expect_rows}
        self.timeouts = timeouts
        self.faults: dict[str, list[Fault]] = {}
        for fault in scenario.faults:
            self.faults.setdefault(fault.workflow, []).append(fault)
        # A fault's category and sanitized message are functions of its text alone: worked
        # out once per distinct text, not at every attempt it fails (redaction runs every
        # secret detector's pattern over the text).
        self.errors: dict[str, tuple[str, str]] = {
            text: (categorize(text), sanitize_error(text)) for text in {f.error for f in scenario.faults}}
        # workflow -> (duration, timeout, the outcome of its usual attempt), made once. An outcome is
        # frozen and nobody changes its `outputs`, so every usual attempt of a workflow shares one:
        # its construction (eight fields set one by one) cost more than the rest of the plan.
        self._spans: dict[str, tuple[timedelta, timedelta, AttemptOutcome]] = {}

    def plan(self, workflow: str, attempt: Attempt, scheduled_for: datetime, start: datetime) -> Plan:
        spans = self._spans.get(workflow)
        if spans is None:
            spans = self._spans[workflow] = (
                timedelta(seconds=self.durations[workflow]), timedelta(seconds=self.timeouts[workflow]),
                AttemptOutcome(status="succeeded", rows=SIMULATED_ROWS if workflow in self.expect_rows else None))
        duration, timeout, usual = spans
        end = start + duration
        faults = self.faults.get(workflow)
        if faults is None and duration < timeout:  # the usual attempt: no fault of its workflow, on time
            return Plan(end, usual)
        hits = [f for f in faults or () if f.start < end and f.end > start]
        # An empty window does not stop the attempt: it succeeds on time having committed nothing.
        empty = False
        if hits:  # most attempts of a workflow with faults overlap none of them
            empty = any(f.mode == "empty" for f in hits)
            hits = [f for f in hits if f.mode != "empty"]
        if hits:
            fault = min(hits, key=lambda f: (max(start, f.start), f.end))
            at = max(start, fault.start)
            if at - start < timeout:
                if fault.mode == "crash":
                    return Plan(at, None)
                category, error = self.errors[fault.error]
                return Plan(
                    at,
                    AttemptOutcome(
                        status="failed",
                        error_category=category,
                        error=error,
                        retryable=fault.retryable,
                        failed_step="recipe",
                    ),
                )
        if duration >= timeout:
            return Plan(
                start + timeout,
                AttemptOutcome(
                    status="failed",
                    error_category="timeout",
                    error=f"the workflow exceeded its timeout of {int(timeout.total_seconds())} s",
                    retryable=True,
                ),
            )
        if empty:
            return Plan(end, AttemptOutcome(status="succeeded", rows=0))
        return Plan(end, usual)


class _Event(NamedTuple):
    at: datetime
    order: int
    seq: int
    action: Callable[[datetime], None]
    token: tuple[str, int] | None = None


# Makes an `_Event` from its fields in C: a named tuple's own constructor is a Python function
# (one call a frame more per event, some 38,000 events a simulated day).
_make_event = tuple.__new__


class EventQueue:
    """A time-ordered queue of actions; a loop has at most one live wake-up at a time.

    The heap holds the events themselves: named tuples, which compare in C by (at, order,
    seq), and `seq` is unique, so a comparison never reaches the action. Every field is
    given, so an event made by `tuple.__new__` is the one `_Event(...)` makes.
    """

    def __init__(self) -> None:
        self._heap: list[_Event] = []
        self._seq = itertools.count()
        self._generation: dict[str, int] = {}

    def at(self, when: datetime, order: int, action: Callable[[datetime], None]) -> None:
        heapq.heappush(self._heap, _make_event(_Event, (when, order, next(self._seq), action, None)))

    def wake(self, name: str, when: datetime, action: Callable[[datetime], None]) -> None:
        """(Re)schedule loop `name`; an earlier pending wake-up of it is dropped."""
        generation = self._generation.get(name, 0) + 1
        self._generation[name] = generation
        heapq.heappush(self._heap, _make_event(
            _Event, (when, ORDER.get(name, 5), next(self._seq), action, (name, generation))))

    def pop(self) -> _Event | None:
        heap, generation = self._heap, self._generation
        while heap:
            event = heapq.heappop(heap)
            token = event.token
            if token is None or generation.get(token[0]) == token[1]:
                return event
            # else superseded by a later wake-up of the same loop
        return None


class SimulatedWorker:
    """Leases attempts through the real ledger and ends them as the outcome model says.

    What the worker writes (an attempt's outcome, a heartbeat's lease renewal) is
    buffered with the time it happened and written, in one transaction of the dedicated
    connection's pipeline (no round trip of its own: it goes out with the next read), just
    before the next pass that could see it (`flush_for`). Nothing reads the ledger in
    between, so every pass sees what it would have seen had each write gone out at
    once; the simulation just makes fewer round trips:

    - the poller, the deadline detector and a manual run see every outcome;
    - the lease reaper acts only on expired leases, so it needs the writes only when
      an attempt shows a lease in the ledger that has run out by now (otherwise
      neither what the ledger shows nor what is pending makes it act);
    - a renewal is written only for a pass that reads leases (`READS_LEASES`), and only
      once the lease it replaces has run out by then: the only leases they read; for the
      deadline detector, only once its run's deadline has passed too (it reads the leases
      of overdue runs alone), which the worker knows (`deadline_of`);
    - the other passes read neither attempts nor runs;
    - of several renewals of one attempt only the newest is written (it overwrites
      everything an earlier one set), and all of them in one statement;
    - the outcomes of a batch are written by one `finish_attempts` statement.
    """

    name = "worker"

    def __init__(self, db: Database, model: OutcomeModel, queue: EventQueue, workflows: dict[int, str],
                 deadline_of: Callable[[int, datetime], datetime | None] = lambda workflow_id, tick: None):
        self.db = db
        # (workflow id, its run's tick) -> the run's deadline, as the ticker and a manual run
        # wrote it (None: unknown, its renewals are written for every lease reader)
        self.deadline_of = deadline_of
        self.model = model
        self.queue = queue
        self.workflows = workflows
        self.in_flight: dict[int, datetime] = {}  # attempt id -> when it stops heartbeating
        self.on_busy: Callable[[datetime], None] = lambda now: None  # wakes the heartbeat
        # wakes the poller, as NOTIFY does: (now, the attempt, its outcome, its run's deadline or None)
        self.on_finished: Callable[[datetime, Attempt, AttemptOutcome, datetime | None], None] = (
            lambda now, attempt, outcome, deadline: None)
        self.finished: list[tuple[Attempt, AttemptOutcome, datetime]] = []  # outcomes not yet written
        self.renewed: dict[int, datetime] = {}  # attempt id -> its newest renewal not yet written
        self.written_lease: dict[int, datetime] = {}  # attempt id -> lease expiry the ledger shows
        self.lease_until: dict[int, datetime] = {}  # attempt id in flight -> expiry of its newest lease or renewal
        self.deadline: dict[int, datetime | None] = {}  # attempt id in flight -> its run's deadline (None: unknown)
        self.crashed: dict[int, datetime] = {}  # attempt id the worker died in -> when its last lease runs out
        self.on_crashed: Callable[[datetime, datetime], None] = lambda now, expiry: None  # wakes the lease reaper
        self.leased_all = False  # the last lease took every attempt queued by then

    def flush_for(self, reader: str, now: datetime) -> None:
        """Write what the worker did since the last flush, if pass `reader` could see it.

        The writes are sent ahead (`DedicatedDatabase.ahead`): they join the reader's first
        transaction, which comes next, and commit with it, at no BEGIN and COMMIT of their
        own. That transaction rolls back only on an error, and an error ends the simulation.
        """
        if reader in SEES_WORKER or (
            reader == "lease-reaper" and any(expiry <= now for expiry in self.written_lease.values())
        ):
            self.flush(now, leases=reader if reader in READS_LEASES else None, ahead=True)

    def flush(self, now: datetime, *, leases: str | None = "any", ahead: bool = False) -> None:
        """Write every outcome not yet written, and every renewal lease reader `leases` could tell apart.

        A lease is read only where it has run out (`lease_expires_at <= now`: the reaper,
        the deadline detector's overdue runs), so a lease the ledger shows running past
        `now` reads as a renewed one would, and a pass that reads no lease (`leases` None)
        reads no renewal: a renewal waits for the first flush for a lease reader that finds
        the lease it would replace run out. The deadline detector reads the lease of a run
        only once the run's deadline has passed, which moves only forward (a check-in's, of
        an external run, which no worker leases): before, it reads neither the old lease nor
        the renewal. `leases="any"` (the world's flushes) writes what any reader could
        see; `leases="all"` (the last flush) every renewal, so that the ledger a simulation
        ends with shows each running attempt's last heartbeat, whichever passes it skipped.
        An outcome clears the lease, so the renewals of a finished attempt are never written
        (its `heartbeat_at` is nobody's read).
        """
        statements: list[tuple[str, dict[str, Any]]] = []
        for attempt, _, _ in self.finished:
            self.renewed.pop(attempt.id, None)
        due = {attempt_id: at for attempt_id, at in self.renewed.items()
               if leases == "all" or (
                   leases is not None
                   and (attempt_id not in self.written_lease or self.written_lease[attempt_id] <= now)
                   and (leases != "deadlines" or self._overdue(attempt_id, now)))}
        if due:
            statements.append(("simulation_renew_leases", renew_params(due, WORKER_ID, LEASE_SECONDS)))
            for attempt_id, at in due.items():
                self.written_lease[attempt_id] = at + LEASE
                del self.renewed[attempt_id]
        if self.finished:
            # An attempt is renewed only while it runs, so its renewals precede its outcome, and
            # distinct attempts' writes touch distinct rows (a batch never holds two attempts of
            # one run: a retry is queued only once the poller has seen the earlier outcome).
            # No notification: nothing listens on a simulation's connection, and the simulator wakes
            # the poller itself (`on_finished`). A notifying commit takes the server's one
            # notification lock, which every notifying commit of the cluster holds through its WAL flush.
            statements.append((finish_text(self.finished, wake=False, steps=False),
                               finish_params(WORKER_ID, self.finished, wake=False)))
            for attempt, _, _ in self.finished:
                self.written_lease.pop(attempt.id, None)
            self.finished = []
        # A crashed attempt whose last lease (written) has run out is the reaper's now: forget it.
        for attempt_id in [a for a, expiry in self.written_lease.items()
                           if expiry <= now and a not in self.in_flight and a not in self.renewed]:
            del self.written_lease[attempt_id]
        if statements and ahead and isinstance(self.db, DedicatedDatabase):
            with self.db.ahead() as conn:
                SimulationRepository(conn).worker_writes(statements)
        elif statements:
            with self.db.autocommit() as store:
                SimulationRepository(store.conn).worker_writes(statements)

    def run_once(self, now: datetime) -> datetime:
        # The lease is the real worker's (`ledger.lease_statements`: the queue's lock and the writes
        # it tells their rows and months, one round trip), in a transaction of its own: an idle
        # worker's poll finds nothing to lease and changes nothing.
        with self.db.autocommit() as store:
            leased = store.ledger.lease_attempts_with_ticks(WORKER_ID, now, LEASE_SECONDS, limit=LEASE_LIMIT)
        self.leased_all = len(leased) < LEASE_LIMIT  # every attempt queued by now is leased
        if leased and not self.in_flight:
            self.on_busy(now)
        expiry = now + LEASE
        # Bound once a pass: a lease takes up to LEASE_LIMIT attempts, some 15,000 a simulated day.
        plan_of, workflows, deadline_of, ender, at = (
            self.model.plan, self.workflows, self.deadline_of, self._ender, self.queue.at)
        in_flight, written_lease, lease_until, deadlines = (
            self.in_flight, self.written_lease, self.lease_until, self.deadline)
        world = ORDER["world"]
        for attempt, scheduled_for in leased:
            plan = plan_of(workflows[attempt.workflow_id], attempt, scheduled_for, now)
            attempt_id = attempt.id
            in_flight[attempt_id] = plan.at
            written_lease[attempt_id] = expiry
            lease_until[attempt_id] = expiry
            deadlines[attempt_id] = deadline_of(attempt.workflow_id, scheduled_for)
            at(plan.at, world, ender(attempt, plan))
        return now + WORKER_POLL

    def _ender(self, attempt: Attempt, plan: Plan) -> Callable[[datetime], None]:
        def end(now: datetime) -> None:
            self.in_flight.pop(attempt.id, None)
            expiry = self.lease_until.pop(attempt.id)
            deadline = self.deadline.pop(attempt.id, None)
            if plan.outcome is None:
                # The worker died here: nothing more is written, the lease will run out.
                self.crashed[attempt.id] = expiry
                self.on_crashed(now, expiry)
                return
            # A renewal not yet written still goes out, just before the outcome (which clears the
            # lease): the ledger then shows the attempt's last heartbeat whenever the flush happens,
            # as the real worker's would. Until the outcome is written, the lease the ledger shows
            # still tells the reaper when to flush.
            self.finished.append((attempt, plan.outcome, now))
            self.on_finished(now, attempt, plan.outcome, deadline)

        return end

    def _overdue(self, attempt_id: int, now: datetime) -> bool:
        """Whether the deadline detector at `now` reads this attempt's lease: its run's deadline has passed (or is unknown)."""
        deadline = self.deadline.get(attempt_id)
        return deadline is None or deadline <= now

    def next_expiry(self) -> datetime | None:
        """The first instant a lease this worker took can be found expired in the ledger (None: none can).

        The simulated worker is the only one that leases, so the leases in the ledger are
        exactly those it took and renewed. An attempt in flight is renewed every
        LEASE_SECONDS / 3, so its lease never runs out; only the attempt of a crash keeps
        its last lease until it expires and the reaper takes it. (No simulated attempt
        runs in an environment instance: the reaper's other work never arises.)
        """
        return min(self.crashed.values(), default=None)

    def reaped(self, attempt_ids: list[int], now: datetime, full: bool) -> None:
        """The lease reaper's pass at `now` took these attempts; after a pass that was not full, none is left due."""
        for attempt_id in attempt_ids:
            self.crashed.pop(attempt_id, None)
        if not full:  # an expired attempt it left was not running any more (cancelled, say)
            for attempt_id in [a for a, expiry in self.crashed.items() if expiry <= now]:
                del self.crashed[attempt_id]

    def heartbeat(self, now: datetime) -> datetime | None:
        """Renew the lease of every attempt still alive, as the real worker's heartbeat does.

        Returns None when nothing is in flight: the next lease wakes the heartbeat again.
        """
        expiry = now + LEASE
        for attempt_id, stops in self.in_flight.items():
            if stops > now:
                self.renewed[attempt_id] = now
                self.lease_until[attempt_id] = expiry
        if not self.in_flight:
            return None
        return now + HEARTBEAT


class SimulatedAutovacuum:
    """Vacuum and analyze the simulation's tables as PostgreSQL's autovacuum would on the virtual clock.

    The server's autovacuum runs on the wall clock, and a virtual day passes in
    seconds: left to it, a simulation's planner would keep the statistics of the
    empty tables it started with and plan a growing ledger as if it were empty (a
    sequential scan of `runs` under every foreign-key check and lease). So the
    simulator does what autovacuum would have done by each virtual minute: once the
    ledger has grown by autovacuum's own rule (50 rows plus 10 % of what it held at the
    last pass), one pass over the schema's tables and partitions that hold rows: a VACUUM
    of each, an ANALYZE of those that changed enough (below). Not of its partitioned tables, which autovacuum never processes: a deployment's
    planner keeps what they held when first analyzed, and analyzing one would sample its
    partitions' rows a second time. Nor of the catalog and the other logged tables, which
    no row reaches after the set-up analyzed them (`simulation_tables_written`): autovacuum
    never visits a table nobody wrote since its last ANALYZE. `visited` counts each table's
    passes (the same on every run of a scenario). The trigger is the count of runs the simulation
    created, not the server's statistics, so the passes fall at the same virtual times
    on every run of the same scenario. The session's statistics target is 10
    (`Simulation._session_url`): an ANALYZE samples 3,000 rows a table, not 30,000.

    VACUUM as well as ANALYZE, though the tables are unlogged scratch: the queues and the
    ledger are updated and deleted from all day, and until a VACUUM records the room the
    dead rows leave, new rows go to fresh pages. Analyzed only, three virtual days ended
    with the ledger's partitions near twice the size and the queues seven times.

    Each pass VACUUMs every written table, then ANALYZEs only the tables whose rows moved,
    since their last ANALYZE, by autovacuum's analyze rule (more than 50 rows plus 10 % of
    what they held then; `moved`), as autovacuum decides per table: a queue at its steady
    size, or a table the day barely touches, needs no new statistics, and an ANALYZE that
    is skipped also leaves the generic plans over that table cached, where each one had them
    planned anew (`Simulation._session_url`). The rows are those the pass's own VACUUM
    counted (`SimulationRepository.vacuum`: `pg_class.reltuples`, read in the same session
    right after), never the asynchronous statistics collector's, so which tables a pass
    analyzes is, like the passes, the same on every run of a scenario. A table no ANALYZE
    of ours has touched counts from 0 rows: the set-up analyzed it empty. The net change in
    rows, not autovacuum's count of changes: the churn of a queue whose size holds leaves
    its row count, and so the planner's sizing of it, where it was. The ledger, which only
    grows, is analyzed at about every pass, as before (the trigger is its own growth).
    `visited` counts each table's passes (each vacuumed it), `analyzed` those that analyzed it too.
    """

    name = "autovacuum"
    NAPTIME = timedelta(minutes=1)  # autovacuum_naptime's default
    THRESHOLD = 50  # autovacuum_analyze_threshold's default
    SCALE_FACTOR = 0.1  # autovacuum_analyze_scale_factor's default

    def __init__(self, db: Database, rows: Callable[[], int]):
        self.db = db
        self.rows = rows
        self.rows_at_last_pass = 0
        self.passes = 0
        self.visited: collections.Counter[str] = collections.Counter()  # table -> passes that vacuumed it
        self.analyzed: collections.Counter[str] = collections.Counter()  # table -> passes that analyzed it
        self.rows_at_analyze: dict[str, float] = {}  # table -> its rows at its last ANALYZE (absent: 0, the set-up's)

    def run_once(self, now: datetime) -> datetime:
        rows = self.rows()
        if rows - self.rows_at_last_pass > self.THRESHOLD + self.SCALE_FACTOR * self.rows_at_last_pass:
            written = None
            if self.db.late_reads:  # the kept pipeline: the table list rides with the sync that leaves it
                with self.db.probe() as store:
                    written = SimulationRepository(store.conn).submit_tables_written()
            with self.db.maintenance() as store:
                repository = SimulationRepository(store.conn)
                sizes = repository.vacuum(written() if written is not None else None)
                due = [table for table, count in sizes.items() if self.moved(table, count)]
                repository.analyze_tables(due)
            self.visited.update(sizes.keys())
            self.analyzed.update(due)
            self.rows_at_analyze.update((table, sizes[table]) for table in due)
            self.rows_at_last_pass = rows
            self.passes += 1
        return now + self.NAPTIME

    def moved(self, table: str, rows: float) -> bool:
        """Whether `table`, holding `rows` now, changed enough since its last ANALYZE to be analyzed again."""
        before = self.rows_at_analyze.get(table, 0.0)
        return abs(rows - before) > self.THRESHOLD + self.SCALE_FACTOR * before


@dataclass
class CatalogPlan:
    """What each workflow of a scenario is published with, worked out before the schema exists."""

    intervals: dict[str, int] = field(default_factory=dict)  # workflow key -> cadence in seconds
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=dict)
    budgets: dict[str, Budget] = field(default_factory=dict)  # the managed workflows'


@dataclass
class SimulationSetup:
    workflow_ids: dict[str, int]
    workflow_names: dict[int, str]
    timeouts: dict[str, int]
    # workflow id -> what its ticks and manual runs get (`catalog.budget_for`, from what it was
    # published with: no scenario edits a workflow), for the managed workflows, which the worker runs
    budgets: dict[int, Budget] = field(default_factory=dict)


class Simulation:
    """One simulation run: a fresh schema, the scenario's catalog, the loops, the clock."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        url: str | None = None,
        overrides: dict[str, Any] | None = None,
        replace_policy: bool = False,
        model_factory: Callable[[Scenario, dict[str, int]], OutcomeModel] | None = None,
        suppress: Callable[[str, datetime], bool] | None = None,
        skip_idle: bool = True,
    ):
        self.scenario = scenario
        self.skip_idle = skip_idle
        self.idle: IdlePasses | None = None  # after the run: how many passes were skipped, how many looks
        self.url = url
        self.overrides = overrides or {}
        self.replace_policy = replace_policy
        self.suppress = suppress
        self.model_factory = model_factory or (lambda scenario, timeouts: FaultWindowModel(scenario, timeouts))
        self.clock = VirtualClock(scenario.start)
        self.schema = f"sim_{uuid.uuid4().hex[:12]}"
        self.queue = EventQueue()
        self.db: Database | None = None
        self._schedule: Callable[[str, datetime], None] = lambda name, when: None
        self._flush: Callable[[], None] = lambda: None
        self._touch_all: Callable[[datetime, dict[str, datetime] | None], None] = lambda now, known: None

    # -- schema -----------------------------------------------------------------------------------

    @staticmethod
    def _session_url(url: str) -> str:
        """`url` with the simulation's own session settings, as connection options.

        Commits that do not wait for the WAL flush: nothing of a simulation outlives it
        (its schema is dropped when it ends, the tables its loops write are unlogged), but
        some of its relations stay logged (the partitioned ledger's parents and the tables
        they reference, their id sequences, the catalog rows VACUUM and ANALYZE write, the
        tables it never writes after its set-up), and a
        transaction that wrote any of them would wait for its WAL to reach the disk at
        commit: each ticker pass (its runs' ids), each table a `VACUUM (ANALYZE)` commits.
        An asynchronous commit is visible to the session at once, as a synchronous one is:
        only what a server crash would keep differs, and a crash loses the simulation anyway.

        Generic plans for prepared statements: the loops run a few dozen statements tens of
        thousands of times, and with custom plans the server plans most of them again at
        every execution (a statement of CTEs over the partitioned ledger takes longer to
        plan than to run). A plan decides how rows are found, never which: every statement
        whose row order matters says it with ORDER BY, as the statistics that `VACUUM
        (ANALYZE)` refreshes already change plans in the middle of a run; each refresh also
        invalidates the generic plans of the tables it analyzed, which are then planned anew.

        A statistics target of 10, not the server's 100: ANALYZE samples 300 rows per unit of
        target, so at 100 it takes every row of a day's ledger and sorts each column's
        values, most of the simulated autovacuum's time (`SimulatedAutovacuum`). Plans need
        row counts, which ANALYZE reads off the 3,000 pages it visits at 10 (every page of a
        day's ledger), and rough distributions: 10 most common values hold every status,
        10 histogram buckets place an instant within a growing ledger's range.

        JIT compilation off, as on every connection a `Database` opens (`Database._options`), and
        here for the connection that builds the schema too (`_create_schema`), which is not one:
        with the server's default a migration's statement over the empty catalog passed
        `jit_above_cost` on estimates alone and was compiled, 16 % of that backend's instructions
        (0.5 of 3.0 billion under callgrind), for statements that run in microseconds.

        The session's time zone UTC, as on every connection a `Database` opens.

        Options, not `SET`: a loop's `RESET synchronous_commit` comes back to them.
        """
        existing = str(conninfo_to_dict(url).get("options") or "")
        ours = ("-c synchronous_commit=off -c plan_cache_mode=force_generic_plan -c default_statistics_target=10"
                " -c jit=off -c TimeZone=UTC")
        return make_conninfo(url, options=" ".join(filter(None, [existing, ours])))

    def _create_schema(self, url: str) -> None:
        """Create the schema, migrate it and unlog the tables its loops write: one connection, one transaction.

        With the simulation's session settings: its commit does not wait for the WAL flush
        (a crash loses the schema with the simulation, see `_session_url`). All or nothing:
        a failed migration leaves no schema behind.
        """
        with psycopg.connect(self._session_url(url)) as conn, conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
            conn.execute("SELECT set_config('search_path', %s, true)", (self.schema,))
            upgrade(conn, self.scenario.start)
            conn.execute(queries()["simulation_unlog_tables"])

    def _drop_schema(self, url: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))

    # -- catalog ----------------------------------------------------------------------------------

    def _plan_catalog(self) -> CatalogPlan:
        """Work out each workflow's cadence, policy, timeout and budget, validating its policy.

        Client work only, no database: `run` does it while the server builds the schema.
        """
        now = self.scenario.start
        plan = CatalogPlan()
        for spec in self.scenario.workflows:
            interval = cadence_of(parse_schedule(spec.cron, spec.timezone), now).interval_seconds
            policy = dict(self.overrides) if self.replace_policy else {**spec.policy, **self.overrides}
            derive_profile(interval, policy)  # validated before anything runs
            plan.intervals[spec.key], plan.policies[spec.key] = interval, policy
            plan.timeouts[spec.key] = default_timeout_seconds(interval)
            if spec.kind == "managed":
                # as the ticker and `run_now` work it out from the published rows
                plan.budgets[spec.key] = budget_for(interval, policy, True, plan.timeouts[spec.key])
        return plan

    def _set_up(self, db: Database, plan: CatalogPlan) -> SimulationSetup:
        now = self.scenario.start
        ids: dict[str, int] = {}
        with db.transaction() as store:
            # Sent before any is read: on the pipelined connection the platform's channel and the
            # tenants are one round trip, and the tenants' channels go out with the workflows'
            # locks (`publish_all`), where each statement waited on its own. Each table's rows are
            # written in the order they were (ids follow it): the platform's channel, then each
            # tenant's, in the scenario's order.
            simulation = SimulationRepository(store.conn)
            channels = [simulation.send_create_channel(None, "platform", "engineering", now)]
            sent = [(name, store.catalog.send_apply_tenant(name, name, False, now)) for name in self.scenario.tenants]
            tenants = {name: read().row for name, read in sent}
            channels += [simulation.send_create_channel(tenant.id, name, "customer", now) for name, tenant in tenants.items()]
            publications = [Publication(
                tenant_id=tenants[spec.tenant].id, name=spec.name, description="", environment_id=None,
                publisher_id=None, recipe={"steps": []}, timeout_seconds=plan.timeouts[spec.key],
                monitoring_enabled=True, policy_overrides=plan.policies[spec.key], shadow=False,
                expect_rows=spec.expect_rows, archived=False, cron=spec.cron, timezone=spec.timezone,
                status="active", cadence_seconds=plan.intervals[spec.key], starting_deadline_seconds=300,
                kind=spec.kind,
            ) for spec in self.scenario.workflows]
            # The same write as apply and the API (no environment or publisher: simulated steps
            # run nothing), one statement a stage: three round trips for the whole catalog.
            published = publish_all(store, publications, now, actor="simulator")
            for read_channel in channels:  # answered with the locks: read, so that none is left unread
                read_channel()
            for spec, one in zip(self.scenario.workflows, published, strict=True):
                ids[spec.key] = one.workflow.id
            for window in self.scenario.maintenance:  # the same write path as the CLI and the API
                covered = window.workflow.partition("/")[2] if window.workflow else None
                maintenance.add_window(store, window.tenant, covered, window.spec, "scenario", now)
        with db.transaction() as store:
            SimulationRepository(store.conn).analyze()
        return SimulationSetup(ids, {v: k for k, v in ids.items()}, plan.timeouts,
                               {ids[key]: budget for key, budget in plan.budgets.items()})

    # -- the run ------------------------------------------------------------------------------------

    def run(self) -> SimulationOutcome:
        """Simulate the scenario from start to end and return what the ledger holds."""
        from tickwarden.db import database_url

        url = self.url or database_url()
        try:
            # The server builds the schema (its DDL and the unlogged tables' file syncs) while
            # the client works out the catalog: otherwise each would wait for the other.
            with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="simulation-schema") as pool:
                created = pool.submit(self._create_schema, url)
                plan = self._plan_catalog()
                created.result()
            self.db = DedicatedDatabase(self._session_url(url), schema=self.schema, application_name=APPLICATION_NAME)
            try:
                with fewer_collections():
                    setup = self._set_up(self.db, plan)
                    self._drive(self.db, setup)
                    return self._collect(self.db, setup)
            finally:
                self.db.close()
        finally:
            self._drop_schema(url)

    def _drive(self, db: Database, setup: SimulationSetup) -> None:
        from tickwarden.deadlines import DeadlineDetector
        from tickwarden.alerts import EscalationClock
        from tickwarden.notifier import Notifier
        from tickwarden.poller import OutcomePoller
        from tickwarden.reaper import LeaseReaper
        from tickwarden.ticker import Ticker
        from tickwarden.transports.recording import RecordingTransport

        outages: dict[int, list[tuple[datetime, datetime]]] = {}
        for key, start, end in self.scenario.trigger_outages:
            outages.setdefault(setup.workflow_ids[key], []).append((start, end))

        def suppressed(workflow_id: int, tick: datetime) -> bool:
            if self.suppress is not None and self.suppress(setup.workflow_names[workflow_id], tick):
                return True
            return any(start <= tick < end for start, end in outages.get(workflow_id, ()))

        spans = [(start, end, workflow_id) for workflow_id, spans in outages.items() for start, end in spans]
        exposed: dict[tuple[datetime, datetime], frozenset[int]] = {}  # the last window's answer: a pass asks per group

        def suppressing(first: datetime, last: datetime) -> frozenset[int] | None:
            """The workflows of which `suppressed` may reject a tick in [first, last]: those of an outage
            overlapping it, or any when the scenario has its own rule."""
            if self.suppress is not None:
                return None
            found = exposed.get((first, last))
            if found is None:
                found = frozenset(w for start, end, w in spans if start <= last and first < end)
                exposed.clear()
                exposed[(first, last)] = found
            return found

        model = self.model_factory(self.scenario, setup.timeouts)
        def deadline_of(workflow_id: int, tick: datetime) -> datetime | None:
            """A run's deadline: `budget.deadline` of its tick, for a tick's run as for a manual one (its tick is its request)."""
            budget = setup.budgets.get(workflow_id)
            return budget.deadline(tick) if budget is not None else None

        worker = SimulatedWorker(db, model, self.queue, setup.workflow_names, deadline_of)
        ticker = Ticker(db, suppressed=suppressed, suppressing=suppressing)

        def expired(cutoff: datetime) -> bool:
            """Whether a lease the simulated worker took has run out by `cutoff` (`next_expiry`).

            Every lease in the ledger is its own, so the reaper's look would find one, unless
            its attempt stopped running meanwhile (cancelled): the reap then finds nothing to act
            on and writes nothing, as the pass that looked would have.
            """
            expiry = worker.next_expiry()
            return expiry is not None and expiry <= cutoff

        loops: list[Any] = [
            ticker,
            worker,
            LeaseReaper(db, expired=expired),
            OutcomePoller(db, "simulated-control-plane"),
            DeadlineDetector(db),
            EscalationClock(db),
            Notifier(db, "simulated-control-plane", {"recording": RecordingTransport()}),
            SimulatedAutovacuum(db, lambda: ticker.created),
        ]
        by_name = {loop.name: loop for loop in loops}
        unknown = set(by_name) - set(ORDER)
        assert not unknown, f"loops without a place in the event order: {unknown}"
        # A pass that queued attempts or notifications wakes their consumers at once, as
        # LISTEN/NOTIFY does in the service (the notifier only for new outbox rows: a `failed`
        # event is history only); polling on each loop's own interval still runs.
        wakes: dict[str, Callable[[Any, datetime], tuple[str, ...]]] = {
            "ticker": lambda ticker, now: ("worker",) if ticker.last_pass and ticker.last_pass.created else (),
            "poller": lambda poller, now: (("worker",) if any(due <= now for due in poller.last.retry_due) else ())
            + (("notifier",) if poller.last.evaluation.notified else ()),
            "lease-reaper": lambda reaper, now: ("poller",) if reaper.last_reaped else (),
            "deadlines": lambda deadlines, now: ("notifier",) if deadlines.last.evaluation.notified else (),
            "escalation": lambda escalation, now: ("notifier",) if escalation.last else (),
        }

        idle = IdlePasses(self.scenario.start, self.scenario.end, {
            "ticker": (ticker.max_sleep, True),
            "worker": (WORKER_POLL, False),
            "lease-reaper": (by_name["lease-reaper"].interval, False),
            "poller": (by_name["poller"].interval, False),
            "deadlines": (by_name["deadlines"].interval, False),
            "escalation": (by_name["escalation"].interval, False),
            "notifier": (by_name["notifier"].poll, True),
        }) if self.skip_idle else None
        self.idle = idle
        kinds = list(by_name["notifier"].transports)
        current = {"order": 0}  # the order of the event being processed (for IdlePasses.touch)
        # loop -> (IdlePasses.changes when its look was sent, the look's reader): see EARLY_LOOKS
        early: dict[str, tuple[int, Callable[[], tuple[datetime | None, datetime | None]]]] = {}

        def send_looks(now: datetime) -> None:
            """Send the look of every loop of EARLY_LOOKS left stale by what just happened, unless sent already."""
            if idle is None:
                return
            stale = idle._stale  # after every event: read in place, not through `stale`
            for name in EARLY_LOOKS:
                if name not in stale:
                    continue
                sent = early.get(name)
                if sent is None or sent[0] != idle.changes[name]:
                    with db.probe() as store:
                        early[name] = (idle.changes[name],
                                       SimulationRepository(store.conn).submit_next_due(name, now, kinds))
        retries_due: list[datetime] = []  # a heap: when each retry the poller queued may be leased
        # Successes whose claim waits for the poller's next pass (see `finished`).
        quiet = Quiet(idle is not None, worker, by_name["poller"].batch_size)
        poller_at = {"next": self.scenario.start}  # the poller's next wake-up by `schedule`
        expects_rows = {setup.workflow_ids[spec.key] for spec in self.scenario.workflows if spec.expect_rows}
        # Workflows whose runs an operator or a check-in may end: their successes always wake the poller.
        quiet.excluded.update(setup.workflow_ids[key] for key, _, _ in self.scenario.cancellations)
        quiet.excluded.update(setup.workflow_ids[checkin.workflow] for checkin in self.scenario.checkins)
        drained = {"resumed": False}  # whether the poller's next claim resumes its walk after a full batch

        actions: dict[str, Callable[[datetime], None]] = {}  # loop -> its pass (filled once `step` is defined)

        def schedule(name: str, when: datetime) -> None:
            if idle is not None:
                idle.jumped.pop(name, None)
            if name == "poller":
                poller_at["next"] = when
            self.queue.wake(name, when, actions[name])

        def touch(name: str, now: datetime, due: datetime | None = None) -> None:
            """What was just written may bring loop `name`'s work forward (to `due`, when known)."""
            if idle is None:
                return
            replaced = idle.touch(name, now, current["order"], due)
            if replaced is not None:
                self.queue.wake(name, replaced, actions[name])

        def touched(name: str, loop: Any, now: datetime, following: datetime) -> None:
            """After a real pass of `name`: the loops whose work it may have brought forward.

            What the pass consumed of its own work is read again (`passed`), except where
            the pass itself says what is left: the ticker read its earliest fire time, a
            deadline pass that found work is followed by a pass, a worker that leased every
            queued attempt has only the retries the poller queued for later, and a poller
            whose claim walked from the start without filling its batch has nothing left. The ticker's
            runs: attempts queued now (the worker is woken) and deadlines; a reaped attempt: the poller's, now; the
            poller's retries: queued for when they fall due; an alert opened or counting
            more failures may escalate (the escalation clock), at the earliest when its
            evaluation says (`EvaluationReport.escalation_due`); every alert event is a
            delivery (the notifier is woken). The other loops a pass cannot have brought
            forward, only pushed back.
            """
            if idle is None or name not in idle.loops:
                return
            if name == "ticker" and loop.last_pass is not None:
                # The pass knows the earliest fire time once its writes are made (what its claim
                # did not take, with what it wrote): what the ticker's look would read, as only
                # the ticker moves schedules (a world event that may publish or edit one makes
                # it stale again). That is its look.
                idle.looked(name, loop.last_pass.earliest, loop.last_pass.earliest, counted=False)
            elif name == "deadlines" and (loop.last.audited_schedules or loop.last.overdue_runs):
                # A pass that found work is followed by a pass, not a look: on a fleet where a
                # tick falls due every minute the look would nearly always answer "now". An
                # early `due` only costs an idle pass, which writes nothing.
                idle.passed(name, following)
            elif name == "worker" and worker.leased_all:
                # Only the poller queues an attempt for later (a retry: `retries_due`); the
                # ticker's and a manual run's are queued now, and wake the worker themselves.
                while retries_due and retries_due[0] <= now:
                    heapq.heappop(retries_due)
                idle.looked(name, retries_due[0] if retries_due else None, None, counted=False)
            elif name == "poller" and loop.last.claimed < loop.batch_size and not drained["resumed"]:
                # A claim that walked the outcomes from the start and was not full took every
                # one finished by now; each later one is the simulator's own write (an attempt
                # ends, a lease is reaped) and wakes the poller, or is a world event's.
                idle.looked(name, None, None, counted=False)
            else:
                idle.passed(name)
            if name == "poller":
                drained["resumed"] = loop.last.claimed >= loop.batch_size  # the next claim resumes its walk
            if name == "ticker" and loop.last_pass and loop.last_pass.created:
                touch("worker", now, now)
                touch("deadlines", now)
            elif name == "lease-reaper" and loop.last_reaped:
                touch("poller", now, now)
            elif name in ("poller", "deadlines"):
                evaluation = loop.last.evaluation
                if evaluation.escalation_due is not None:  # a new warning, or one whose failures reached escalation
                    # when, at the earliest, as the pass knows it: no look at the ledger needed for it
                    touch("escalation", now, evaluation.escalation_due)
                if name == "poller" and loop.last.retry_due:
                    touch("worker", now, min(loop.last.retry_due))
                    for due in loop.last.retry_due:
                        heapq.heappush(retries_due, due)
                if evaluation.notified:
                    touch("notifier", now, now)
            elif name == "escalation" and loop.last:
                touch("notifier", now, now)

        def step(name: str, now: datetime) -> None:
            if idle is not None and name in idle.loops:
                if name == "lease-reaper":
                    # Every lease in the ledger is the simulated worker's: it knows when the first runs out.
                    idle.looked(name, worker.next_expiry(), None, counted=False)
                elif idle.must_look(name, now):
                    sent = early.pop(name, None)
                    if sent is not None and sent[0] == idle.changes[name]:
                        idle.looked(name, *sent[1]())
                    else:
                        with db.probe() as store:
                            idle.looked(name, *SimulationRepository(store.conn).next_due(name, now, kinds))
                if idle.due[name] > now:
                    # This pass would find nothing: the loop wakes where its chain of idle
                    # passes first reaches the instant its work could be due.
                    target = idle.jump(name, now)
                    self.queue.wake(name, target, actions[name])
                    return
            worker.flush_for(name, now)  # the pass sees what the worker did before it
            loop = by_name[name]
            following = loop.run_once(now)
            quiet.passed(db, name, loop)
            if name == "worker" and quiet.crowded() and poller_at["next"] > now:
                # The lease may have crowded the waiting successes: claimed now, before any attempt
                # it took can end, they claim nothing else (a pass owed at this instant would).
                touch("poller", now, now)
                step("poller", now)
            if name == "lease-reaper":
                worker.reaped([item.attempt_id for item in loop.last_reaped], now, following <= now)
            schedule(name, max(following, now + ONE_MILLISECOND))
            touched(name, loop, now, following)
            woken = wakes.get(name)
            for consumer in woken(loop, now) if woken else ():
                schedule(consumer, now)
            if name == "poller":
                # A retry held back by its backoff is leased when it falls due, as the
                # real worker's one-second idle poll would; not at the simulated worker's next poll.
                for due in sorted({due for due in loop.last.retry_due if due > now}):
                    self.queue.at(due, ORDER["worker"], actions["worker"])

        # Each loop's pass as the action of its wake-ups: `step` bound to its name once, called with the
        # event's instant from C (a lambda made at every wake-up was a frame more at every event).
        actions.update((loop.name, functools.partial(step, loop.name)) for loop in loops)
        self._schedule = schedule
        def touch_all(now: datetime, known: dict[str, datetime] | None = None) -> None:
            """A scenario's world event: any loop may have work, due at `known[loop]` where the event says when."""
            for name in idle.loops if idle else ():
                touch(name, now, (known or {}).get(name))

        self._touch_all = touch_all
        self._flush = lambda: worker.flush(self.clock.now())
        for loop in loops:
            first = self.scenario.start if loop is worker else self.scenario.start + CONTROL_PLANE_OFFSET
            schedule(loop.name, first)
        self._heartbeat(worker)

        def finished(now: datetime, attempt: Attempt, outcome: AttemptOutcome, deadline: datetime | None) -> None:
            """An outcome, written or not yet, is the poller's work from now, unless its claim changes nothing.

            The claim of a success that decides its run (before the run's deadline, so no
            deadline pass closed the run first; with the rows its workflow expects, if any) of a
            workflow with no open alert (`Quiet`) leads to no evaluation and writes nothing but
            the claim. Such a success does not wake the poller: its claim rides with the next
            pass, which decides what its claim at the finish would have (alerts move only in
            poller and deadline passes, and a deadline pass's only leave it an evaluation that
            decides nothing: see `Quiet`), walks the queue
            from its oldest outcome, and finds at most QUIET_LIMIT of them there (`drained`:
            never behind a full batch). A pass owes nothing else to an earlier one: the poller's
            `_busy` only spares a look, and no other loop reads the outcome queue.
            """
            if (not drained["resumed"] and outcome.status == "succeeded" and deadline is not None and now < deadline
                    and (attempt.workflow_id not in expects_rows or outcome.rows)
                    and quiet.wait(attempt.workflow_id)):
                return
            touch("poller", now, now)
            schedule("poller", now)

        worker.on_finished = finished
        worker.on_crashed = lambda now, expiry: touch("lease-reaper", now, expiry)
        for key, at in self.scenario.manual_runs:
            self.queue.at(at, ORDER["world"], self._manual(db, key, setup))
        for key, at, by in self.scenario.cancellations:
            self.queue.at(at, ORDER["world"], self._cancel(db, key, by, setup))
        for checkin in self.scenario.checkins:
            self.queue.at(checkin.at, ORDER["world"], self._checkin(db, checkin))

        # The clock is the simulation's own: only this loop moves it, so it is set only when an
        # event's instant differs from the last one's (30,149 events a simulated day fall on 10,243 instants).
        clock_at: datetime | None = None
        # Only a loop of EARLY_LOOKS left stale needs `send_looks` (a C test, not a call, per event).
        stale = idle._stale if idle is not None else set()
        while True:
            event = self.queue.pop()
            if event is None or event.at > self.scenario.end:
                break
            at = event.at
            if at != clock_at:
                self.clock.set(at)
                clock_at = at
            current["order"] = event.order
            event.action(at)
            if stale and not stale.isdisjoint(EARLY_LOOKS):
                send_looks(at)
        worker.flush(self.clock.now(), leases="all")

    def _heartbeat(self, worker: SimulatedWorker) -> Callable[[datetime], None]:
        def beat(now: datetime) -> None:
            following = worker.heartbeat(now)
            if following is not None:
                self.queue.wake("heartbeat", following, beat)

        # a lease taken while idle starts the heartbeat one period later
        worker.on_busy = lambda now: self.queue.wake("heartbeat", now + HEARTBEAT, beat)
        return beat

    def _manual(self, db: Database, key: str, setup: SimulationSetup) -> Callable[[datetime], None]:
        def request(now: datetime) -> None:
            from tickwarden.catalog import run_now

            tenant, workflow = key.split("/", 1)
            self._flush()
            run_now(db, tenant, workflow, now, requested_by="scenario")
            # The run's first attempt is queued now (run_now raises when it queues none), and a
            # manual run is the worker's only new work: its due is now, no look needed.
            self._touch_all(now, {"worker": now})
            self._schedule("worker", now)

        return request

    def _cancel(self, db: Database, key: str, by: str, setup: SimulationSetup) -> Callable[[datetime], None]:
        def cancel(now: datetime) -> None:
            from tickwarden.catalog import cancel as cancel_run

            self._flush()  # the operator sees what the worker already wrote
            with db.transaction() as store:
                run_id = SimulationRepository(store.conn).run_in_progress(setup.workflow_ids[key])
            if run_id is not None:  # nothing in progress: the operator has nothing to cancel
                cancel_run(db, run_id, now, by)
                self._touch_all(now, None)

        return cancel

    def _checkin(self, db: Database, checkin: Checkin) -> Callable[[datetime], None]:
        def report(now: datetime) -> None:
            from tickwarden import checkins

            tenant, workflow = checkin.workflow.split("/", 1)
            try:
                checkins.report_by_name(db, tenant, workflow, checkins.Report(checkin.status, checkin.tick), now)
            except TickwardenError as exc:
                # What the ping URL would have answered (a late report, no tick due yet): the
                # scenario goes on, as the job's scheduler would.
                log.info("check-in of %s at %s refused: %s", checkin.workflow, now.isoformat(), exc.message)
                return
            self._touch_all(now, None)
            self._schedule("poller", now)  # as the NOTIFY sent with the report's commit does

        return report

    def _collect(self, db: Database, setup: SimulationSetup) -> SimulationOutcome:
        with db.transaction() as store:
            simulation = SimulationRepository(store.conn)
            runs = simulation.runs()
            return SimulationOutcome(
                scenario=self.scenario,
                runs=runs,
                attempts=simulation.attempts(runs),
                alerts=simulation.alerts(),
                alert_events=simulation.alert_events(),
                notifications=simulation.notifications(),
                extra={"overrides": self.overrides, "replace_policy": self.replace_policy},
            )


class SimulationOutcome:
    """What a simulation left in its ledger, as plain rows.

    `attempts` may be given as a function that makes them: they are then made at their
    first read (a month holds half a million, and a noise score reads none).
    """

    def __init__(
        self,
        scenario: Scenario,
        runs: list[dict[str, Any]],
        attempts: list[dict[str, Any]] | Callable[[], list[dict[str, Any]]],
        alerts: list[dict[str, Any]],
        alert_events: list[dict[str, Any]],
        notifications: list[dict[str, Any]],
        extra: dict[str, Any] | None = None,
    ):
        self.scenario = scenario
        self.runs = runs
        self._attempts = attempts
        self.alerts = alerts
        self.alert_events = alert_events
        self.notifications = notifications
        self.extra: dict[str, Any] = {} if extra is None else extra

    @property
    def attempts(self) -> list[dict[str, Any]]:
        if callable(self._attempts):
            self._attempts = self._attempts()
        return self._attempts

    @property
    def attempts_maker(self) -> list[dict[str, Any]] | Callable[[], list[dict[str, Any]]]:
        """The attempts as given: made or still a maker (so that a copy of the outcome makes them only if read)."""
        return self._attempts

    def __repr__(self) -> str:
        return (f"SimulationOutcome({self.scenario.name!r}: {len(self.runs)} runs, {len(self.alerts)} alerts, "
                f"{len(self.notifications)} notifications)")


def simulate(scenario: Scenario, **kwargs: Any) -> SimulationOutcome:
    return Simulation(scenario, **kwargs).run()
