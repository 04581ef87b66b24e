"""The worker: lease an attempt, act as its publisher, run its recipe graph, record the outcome.

One pass (`run_once`) at time `now`, on one pooled connection held for the pass
(`Database.hold`: the pool's check of a lent connection is paid once, not per borrow):

1. Stop environments idle past their timeout (the janitor).
2. Take the next attempt leased ahead (below), or, when a read-only look finds one due
   (an idle poll is that one round trip), lease up to `batch` queued attempts and load
   their contexts in one exchange (`FOR UPDATE SKIP LOCKED`); none: come back after the
   poll interval.
3. Renew the lease from a heartbeat thread every lease/3; when a renewal finds the
   lease gone (reaped as lost), stop the step and abandon the result.
4. Load the workflow; a malformed stored recipe is a `config` failure.
5. Authenticate as the publisher; a missing or deactivated one is an `auth` failure.
6. Wake the environment (or reuse it warm) and run the steps in dependency order,
   each under the watchdog: min(step timeout, what is left of the workflow timeout).
   A failed step skips its dependants; a timeout or a dead environment skips the rest.
7. Record the outcome and the per-step rows with `ledger_finish_attempts`, which also
   decides pending_retry vs failed by budget: the worker's only monitoring duty lives
   there, in SQL, and nowhere else. A database outage at that moment is waited out (the
   heartbeat keeps renewing): the result of work done is never dropped, only refused by
   the compare-and-set if the lease was taken away. The same exchange (one round trip,
   with its lease too; one durable commit: `ExecutionRepository.exchange`) puts the
   environment back to warm, starts the next attempt leased ahead on a full lease, and,
   when none is left, leases the next batch with its contexts, overlapping the next lease
   with this outcome's commit.

Of a batch leased at once, the first starts with the lease (`started_at`); the others
are leased ahead: leases fenced by the worker id, with no `started_at`, that the worker
starts one at a time by a compare-and-set on (running, this worker, not started) —
riding in the previous outcome's exchange, or on its own — and skips when it fails.
They never wait long: one is started only while more than two thirds of its lease
remain, and the heartbeat of a running attempt gives them all back to the queue
`PREFETCH_WAIT` after they were leased, so a long attempt does not hold them from idle
workers; the heartbeat therefore renews only the running attempt's lease. `close` gives
them back when the worker stops. Those that cannot be given back while the database is
away are given back by the next pass that reaches it. When the worker died first, they
expire and the lease reaper puts them back in the queue as they were, neither lost nor
counted against their runs' budgets; a live worker whose leases ran out meanwhile finds,
by its compare-and-set, that they are no longer its own and skips them. So an attempt
leased ahead is never lost and never run twice. Every commit that starts an attempt
(the outcome's exchange, or the lease of an idle worker) waits for the WAL flush, so a
database crash cannot hand a running attempt back to the queue; the busy mark is a
claim whose loss in a crash puts things back as they were, and does not wait.

Round trips of a warm attempt that needs no secret (benchmarks/worker.py counts them):
the held connection's check and the outcome's exchange (a process that serves the next
attempt too stays busy without a mark: `EnvironmentPool.released`); the run
credential is issued from the lease's and the context's names without a transaction of
its own.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
import dataclasses
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from collections.abc import Iterator

from tickwarden import auth, metrics, secrets
from tickwarden.categories import categorize, is_retryable
from tickwarden.clock import Clock, WallClock
from tickwarden.db import Database
from tickwarden.environments import pods
from tickwarden.environments import Aborted, EnvironmentFailed, EnvironmentPool, Instance, WatchdogTimeout
from tickwarden.environments.pool import busy_row_stands
from tickwarden.environments.runner import dumps_str
from tickwarden.errors import DatabaseUnavailable
from tickwarden.models import Attempt, AttemptOutcome, Environment, FinishedAttempt, Workflow
from tickwarden.store.execution import Exchanged, ExecutionContext, InstanceMark, LeaseMark
from tickwarden.profile import timeout_for
from tickwarden.recipes import Recipe, RecipeError, Step, blocked_by, parse_recipe
from tickwarden.sanitize import redact_value, sanitize_error, sanitize_log_tail

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
MAX_OUTPUT_BYTES = 4096
MAX_OUTPUTS_BYTES = 16384
STEP_LOG_LINES = 50
STEP_LOG_CHARS = 4000
# Pauses between tries to record an outcome while the database is away: first, longest.
RECORD_RETRY_FIRST = 0.2
RECORD_RETRY_LONGEST = 1.0  # the reaper holds off for 30 s after an outage
# Seconds attempts leased ahead may wait, from their lease, while another attempt of their worker
# runs, before its heartbeat gives them back to the queue.
PREFETCH_WAIT = 1.0
# Workflows whose parsed recipe a worker keeps (all are forgotten when more come).
MAX_RECIPES = 4096


@dataclass
class StepRecord:
    """What one step did, ready for `attempt_steps`."""

    step: str
    position: int
    status: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    log: str = ""
    output: Any = None
    error: str | None = None

    def row(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "position": self.position,
            "status": self.status,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "log": self.log,
            "output": self.output,
            "error": self.error,
        }


@dataclass
class Result:
    """An attempt's outcome and its steps, before it is recorded."""

    outcome: AttemptOutcome
    steps: list[StepRecord] = field(default_factory=list)


class _Flag:
    """A flag one thread sets and another reads, never waited on: `threading.Event`'s `set` and
    `is_set` without its condition and lock, which cost more to make, once per attempt, than a
    no-op attempt's whole outcome mark."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class Watch:
    """The lease of the attempt a worker is running, as its heartbeat renews it (state, not a value).

    `lost` is set when a renewal finds the lease gone (reaped as lost): the attempt's
    steps stop and its result is abandoned. `beat` and `give_back` (monotonic) are when
    the heartbeat next renews the lease and gives the attempts leased ahead back to the queue.
    """

    __slots__ = ("attempt", "interval", "beat", "give_back", "lost")

    def __init__(self, attempt: Attempt, interval: float, beat: float, give_back: float | None):
        self.attempt = attempt
        self.interval = interval
        self.beat = beat
        self.give_back = give_back
        self.lost = _Flag()

    @property
    def due(self) -> float:
        """When (monotonic) the heartbeat next has something to do for this attempt."""
        return self.beat if self.give_back is None else min(self.beat, self.give_back)


class LeaseRenewer:
    """Renew the running attempt's lease every lease/3 seconds from one thread per worker.

    The thread outlives attempts (starting one per attempt cost more than the no-op
    attempt it watched) and exits after `IDLE_SECONDS` without an attempt (counted from when
    it notices the last one ended: within `IDLE_SECONDS`); `watching` starts it again. Invariant, as with a thread per attempt: once `watching` returns,
    nothing is done for that attempt any more. It waits for a renewal or give-back in
    flight, so the worker's next steps never race one of this attempt's.
    """

    IDLE_SECONDS = 5.0

    def __init__(self, worker: Worker):
        self.worker = worker
        self._cond = threading.Condition()
        self._watch: Watch | None = None
        self._acting: Watch | None = None  # the watch the thread is renewing or giving back for
        self._thread: threading.Thread | None = None
        # When (monotonic) the thread next looks at the watch by itself; 0 while it is acting (it looks
        # again before it waits). A new watch wakes it only when it is due before that.
        self._looks_at = 0.0

    @contextlib.contextmanager
    def watching(self, attempt: Attempt) -> Iterator[Watch]:
        """Renew `attempt`'s lease until the block ends; give back the leases taken ahead if it runs long."""
        interval = self.worker.lease_seconds / 3
        # Attempts leased ahead wait for this worker only briefly: past that, its attempts are
        # long ones, and they go back to the queue for an idle worker instead of waiting on it.
        oldest = self.worker.leased_ahead_since()
        watch = Watch(attempt, interval, time.monotonic() + interval,
                      None if oldest is None else oldest + min(PREFETCH_WAIT, interval))
        with self._cond:
            self._watch = watch
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{self.worker.worker_id}",
                                                daemon=True)
                self._thread.start()
            elif watch.due < self._looks_at:
                # Waking the thread for every attempt cost more than a short attempt's own client work:
                # it is woken only when it would otherwise look too late.
                self._cond.notify_all()
        try:
            yield watch
        finally:
            with self._cond:
                self._watch = None  # the thread finds it gone when it next looks
                while self._acting is watch:
                    self._cond.wait()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    watch = self._watch
                    if watch is None:
                        self._looks_at = time.monotonic() + self.IDLE_SECONDS
                        if not self._cond.wait(self.IDLE_SECONDS) and self._watch is None:
                            self._thread = None  # under the lock: `watching` starts a new one
                            return
                        continue
                    now = time.monotonic()
                    if watch.due <= now:
                        break
                    # At most IDLE_SECONDS: a watch that ended is not announced, and is noticed then.
                    self._looks_at = min(watch.due, now + self.IDLE_SECONDS)
                    self._cond.wait(self._looks_at - now)
                self._looks_at = 0.0
                self._acting = watch
                giving_back = watch.give_back is not None and time.monotonic() >= watch.give_back
                if giving_back:
                    watch.give_back = None
                else:
                    watch.beat += watch.interval
            try:
                if giving_back:
                    self.worker.give_back()
                else:
                    self._renew(watch)
            except Exception as exc:  # the thread serves the worker's next attempts: it must not die
                log.warning("the heartbeat of attempt %s failed: %s", watch.attempt.id, type(exc).__name__)
            finally:
                with self._cond:
                    self._acting = None
                    self._cond.notify_all()

    def _renew(self, watch: Watch) -> None:
        worker = self.worker
        try:
            with worker.db.transaction() as store:
                held = store.ledger.renew_lease(watch.attempt, worker.worker_id, worker.clock.now(),
                                                worker.lease_seconds)
        except DatabaseUnavailable:
            return  # the outage is logged once, by db; the lease has slack
        except Exception as exc:  # a database hiccup: try again at the next beat, the lease has slack
            log.warning("could not renew the lease of attempt %s: %s", watch.attempt.id, type(exc).__name__)
            return
        if not held:
            log.warning("attempt %s: the lease was lost; its result will be abandoned", watch.attempt.id)
            watch.lost.set()
            with self._cond:  # nothing more for this attempt
                if self._watch is watch:
                    self._watch = None


class Worker:
    """Executes queued attempts; several may run at once, in one process or many."""

    name = "worker"

    def __init__(
        self,
        db: Database,
        worker_id: str,
        *,
        lease_seconds: float = 30,
        environments: EnvironmentPool | None = None,
        clock: Clock | None = None,
        poll_seconds: float = POLL_SECONDS,
        secret_key: str | None = None,
        environ: dict[str, str] | None = None,
        batch: int = 1,
    ):
        self.db = db
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.environments = environments or EnvironmentPool(db, worker_id)
        self.clock = clock or WallClock()
        self.poll_seconds = poll_seconds
        self._key = secret_key or auth.secret_key()
        self._environ = environ
        self._keyring = secrets.Keyring(self._key, secrets.Keyring.old_keys(environ))
        # Set by the owner to give up on the current attempt (a stopping worker past its grace).
        self.abort = threading.Event()
        self.batch = batch  # attempts leased at once
        self._warm: Instance | None = None
        # Attempts leased (with the previous lease or outcome), with their context and run key,
        # waiting for the next passes; shared with the heartbeat, which gives them back
        # (`give_back`). Only the head may be started already (the first of a batch, or
        # started by the outcome before it); the others are leased ahead.
        self._queue: deque[_Ahead] = deque()
        # Attempts given back while the database was away: given back at the next pass that
        # reaches it, so they wait for the reaper only if this worker dies first.
        self._owed: dict[int, Attempt] = {}
        self._queue_lock = threading.Lock()
        self._heartbeat = LeaseRenewer(self)
        # Each workflow's recipe as last parsed, with the stored recipe and `updated_at` it came from.
        self._recipes: dict[int, tuple[datetime, dict[str, Any], Recipe]] = {}
        # Each workflow's environment as last leased: what the outcome that leases the next attempt
        # judges it by, to keep the process busy for it (`_marked_by_lease`).
        self._environments: dict[int, Environment] = {}

    def run_once(self, now: datetime) -> datetime:
        """Stop idle environments, then execute one attempt (leased ahead, or leased now); return the next wake-up."""
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self.db.hold())
                self._release_owed()
                self.environments.stop_idle(now)
                leased = self._take_next(now) or self._lease(now)
            except DatabaseUnavailable:  # nothing was leased; the outage is logged once, by db
                return now + timedelta(seconds=self.poll_seconds)
            if leased is None:
                return now + timedelta(seconds=self.poll_seconds)
            self.execute(*leased, lease_next=True)
        return self.clock.now()

    def _lease(self, now: datetime) -> _Leased | None:
        # A worker with nothing leased is idle, or was: it looks first, read only (one round trip and
        # one small read, where the lease, one round trip too, opens a transaction and runs its lock,
        # writes and contexts), and leases only when something is due. A busy
        # worker's leases ride with its outcomes and never come here. The lease and the contexts
        # are one exchange. It waits for the disk: it starts the first attempt, which this worker
        # then runs; a start lost in a crash would put the attempt back in the queue while it
        # runs here, for another worker to run again.
        with self.db.autocommit() as store:
            if not store.execution.queue_waiting(now):
                return None
            exchanged = store.execution.exchange(self.worker_id, now, self.lease_seconds, lease=self.batch)
        self._enqueue(exchanged, now)
        return self._take_next(now)

    def _enqueue(self, exchanged: Exchanged, now: datetime) -> None:
        if not exchanged.leased:  # most outcomes lease nothing: a batch is leased when the queue runs dry
            return
        metrics.current().attempts_leased(exchanged.leased, now)
        if len(self._environments) >= MAX_RECIPES:
            self._environments.clear()
        for workflow_id, context in exchanged.contexts.items():
            if context.environment is not None:
                self._environments[workflow_id] = context.environment
        stamp = time.monotonic()
        with self._queue_lock:
            self._queue.extend(_Ahead(_leased(found, exchanged.contexts), now, stamp, found[0].started_at is not None)
                               for found in exchanged.leased)
            # Leased again (the reaper gave it back meanwhile): this worker's under the new lease, not owed.
            for found in exchanged.leased:
                self._owed.pop(found[0].id, None)

    def leased_ahead_since(self) -> float | None:
        """When (monotonic) the oldest attempt still leased ahead was leased; None when there is none."""
        with self._queue_lock:
            return min((ahead.stamp for ahead in self._queue), default=None)

    def _take_next(self, now: datetime) -> _Leased | None:
        """The next attempt leased, started on a full lease, if its lease is still young enough.

        The heartbeat first renews a lease a third of its length after the attempt
        starts; an attempt is taken only while more than two thirds of its lease remain,
        so the lease cannot run out before that first renewal. Otherwise (a pass held up
        for long), it and those behind it are given back to the queue. One leased ahead
        and not yet started by the outcome before it is started here, by the
        compare-and-set `start_attempt`: when this worker no longer holds its lease (the
        reaper gave it back after it ran out, and another worker may run it), it is
        skipped, never run.
        """
        while True:
            with self._queue_lock:
                if not self._queue:
                    return None
                ahead = self._queue.popleft()
            if now - ahead.at >= timedelta(seconds=self.lease_seconds / 3):
                with self._queue_lock:
                    self._queue.appendleft(ahead)
                self.give_back()
                return None
            if ahead.started:
                return ahead.leased
            try:
                with self.db.autocommit() as store:
                    started = store.execution.start_attempt(ahead.leased[0], self.worker_id, now,
                                                            self.lease_seconds)
            except DatabaseUnavailable:  # not started, or not known to be: the next pass tries again
                with self._queue_lock:
                    self._queue.appendleft(ahead)
                raise
            if started:
                return ahead.leased
            log.info("attempt %s: the lease taken ahead is no longer this worker's; skipped", ahead.leased[0].id)
            # Started already only if an earlier try committed unseen: still this worker's lease, given back.
            self._release([ahead.leased])

    def give_back(self) -> None:
        """Give every attempt leased ahead back to the queue (an idle worker takes them); each runs once.

        A lease that cannot be given back (the database is away) is given back by the next
        pass that reaches the database; if the worker dies first, it runs out and the reaper
        puts its attempt, never started, back in the queue as it was: not lost, no budget spent.
        """
        with self._queue_lock:
            leased, self._queue = [ahead.leased for ahead in self._queue], deque()
        self._release(leased)

    def _release(self, leased: list[_Leased]) -> None:
        """Give these leases back (compare-and-set: those no longer this worker's stay as they are).

        While the database is away they are owed, given back by the next pass that reaches it.
        """
        if not leased:
            return
        attempts = [attempt for attempt, _, _ in leased]
        try:
            with self.db.transaction() as store:
                store.execution.release_attempts(attempts, self.worker_id)
        except DatabaseUnavailable:
            log.warning("could not give back %s leased attempts; the next pass will", len(leased))
            with self._queue_lock:
                self._owed.update((attempt.id, attempt) for attempt in attempts)

    def _release_owed(self) -> None:
        """Give back the leases an outage kept from being given back (`DatabaseUnavailable` if it goes on).

        Only leases not taken again since: none of them is in the queue (a worker leases only
        with its queue empty, and a lease taken again is struck off in `_enqueue`).
        """
        with self._queue_lock:
            if not self._owed:
                return
            owed = [self._owed[attempt_id] for attempt_id in sorted(self._owed)]
        with self.db.transaction() as store:
            store.execution.release_attempts(owed, self.worker_id)
        with self._queue_lock:
            for attempt in owed:
                self._owed.pop(attempt.id, None)

    def close(self, now: datetime) -> None:
        """Give back the attempts leased ahead and stop this worker's environment processes (once its loop has stopped)."""
        self.give_back()
        with contextlib.suppress(DatabaseUnavailable):  # still away: the reaper gives them back
            self._release_owed()
        self.environments.close(now)

    def execute(self, attempt: Attempt, context: ExecutionContext | None = None, run: auth.RunKey | None = None,
                *, lease_next: bool = False) -> FinishedAttempt | None:
        """Run a leased attempt and record its outcome; None when the result was abandoned.

        `run`: the run key when the caller has its names (no look-up needed);
        `lease_next`: start the next attempt leased ahead, or lease the next batch, with the outcome (`run_once`).
        """
        if context is None:
            with self.db.transaction() as store:
                context = store.execution.context(attempt.workflow_id, self.clock.now())
        self._run_key = run
        self._warm = None
        with self._heartbeat.watching(attempt) as heartbeat:
            try:
                result = self._run(attempt, context, heartbeat)
            except Aborted:
                result = None
            except Exception as exc:  # tickwarden's own failure: record it rather than wait for the reaper
                log.exception("attempt %s: the worker failed", attempt.id)
                result = _failed(("internal", f"the worker failed: {type(exc).__name__}", None), [], [])
            if result is not None and not (context is not None and context.workflow is not None
                                           and context.workflow.keep_outputs):
                result = _without_outputs(result)
            warm, self._warm = self._warm, None
            if heartbeat.lost.is_set() or result is None:
                if warm is not None:
                    self.environments.release(warm, self.clock.now())
                if result is not None:
                    return None
                with self.db.transaction() as store:
                    store.execution.release_attempt(attempt, self.worker_id)
                log.info("attempt %s released back to the queue", attempt.id)
                return None
            # Still under the heartbeat: while an outage holds up the write, the lease is renewed
            # as soon as the database answers, so the reaper does not take the attempt meanwhile.
            finished = self.record(attempt, result, warm, lease_next=lease_next and not self.abort.is_set())
        outcome = result.outcome
        log.info("attempt %s (run %s, workflow %s): %s%s%s", attempt.id, attempt.run_id,
                 context.workflow.name if context else attempt.workflow_id, outcome.status,
                 f" [{outcome.error_category}] {outcome.error}" if outcome.status != "succeeded" else "",
                 "" if finished.applied else " (already recorded: ignored)",
                 extra={"attempt_id": attempt.id, "run_id": attempt.run_id, "workflow_id": attempt.workflow_id})
        return finished

    def record(self, attempt: Attempt, result: Result, warm: Instance | None = None, *,
               lease_next: bool = False) -> FinishedAttempt:
        """Write the outcome and the step rows once; a second delivery changes nothing.

        The result of work done is the one thing that must not be lost: while the database
        is away, the write is tried again with a growing pause until it answers (or the
        worker is told to give up). The wait is bounded by the lease's ownership: once the
        reaper has taken the attempt away, the compare-and-set refuses the late write
        (`applied` is False). The environment that served the attempt goes back to warm in
        the same transaction.
        """
        finished_at = self.clock.now()  # when the attempt finished, however long the write waits
        with self._queue_lock:
            following = self._queue[0].leased[1] if self._queue and lease_next else None
        written = (warm.marked, warm.marked_at) if warm is not None else None  # its row, as written before this
        mark = self.environments.released(warm, finished_at,
                                          next_environment=following.environment if following else None)
        marking: InstanceMark | LeaseMark | None = mark
        if following is None and lease_next and warm is not None and mark is not None and written is not None:
            marking = self._marked_by_lease(warm, mark, written, finished_at)
        pause = RECORD_RETRY_FIRST
        while True:
            # A start and a lease count from when they are written, not from when the attempt
            # finished: after an outage, a lease from then would already have run out.
            now = self.clock.now()
            with self._queue_lock:
                head = self._queue[0] if self._queue and lease_next else None
                start = head.leased[0] if head is not None and not head.started else None
                lease = self.batch if lease_next and not self._queue else 0
            try:
                with self.db.autocommit() as store:
                    exchanged = store.execution.exchange(self.worker_id, now, self.lease_seconds, attempt=attempt,
                                                         outcome=result.outcome, steps=[s.row() for s in result.steps],
                                                         instance=marking, start=start, lease=lease,
                                                         finished_at=finished_at)
                break
            except DatabaseUnavailable:
                if self.abort.wait(pause):
                    raise
                pause = min(pause * 2, RECORD_RETRY_LONGEST)
        assert exchanged.finished is not None
        finished = exchanged.finished
        if start is not None:
            with self._queue_lock:
                if self._queue and self._queue[0].leased[0].id == start.id:
                    if exchanged.started:  # a full lease from now
                        head = self._queue[0]
                        self._queue[0] = _Ahead(head.leased, now, head.stamp, True)
                    else:  # no longer this worker's lease: another worker may run it
                        self._queue.popleft()
                        log.info("attempt %s: the lease taken ahead is no longer this worker's; skipped", start.id)
        self._enqueue(exchanged, now)
        if warm is not None and warm.marked == "busy":
            with self._queue_lock:
                upcoming = self._queue[0].leased[1] if self._queue else None
            # Kept busy for an attempt that is not the one coming next: idle until then.
            self.environments.settle(warm, upcoming.environment if upcoming else None, self.clock.now())
        metrics.current().attempt_finished(attempt, result.outcome.status, finished, finished_at)
        return finished

    def _marked_by_lease(self, instance: Instance, mark: InstanceMark, written: tuple[str, datetime | None],
                         finished_at: datetime) -> LeaseMark:
        """The mark of the process that served an outcome whose exchange leases the next attempts.

        Decided in the lease's own round trip, by the attempt it locks first (`LeaseMark`):
        busy when that one, which this worker runs next, is of a workflow last leased with an
        environment this process serves, so its `acquire` writes nothing (a round trip of its
        own at every lease otherwise, every attempt at a batch of 1); else warm. Busy, with its
        row already busy and written recently, it writes none (`EnvironmentPool.lease_mark`),
        as between attempts leased together. The server is given the workflows that keep it
        busy and whether the row stands; the worker then records what the server wrote
        (`decide`), so the rule is applied in one place. A guess from an environment since
        changed is corrected by `EnvironmentPool.settle` once the context is read. `written`:
        the process's row as it stood before this outcome (`released` counted the outcome as if
        for a warm mark).
        """
        stands = busy_row_stands(*written, finished_at)  # a busy row written within BUSY_MARK_SECONDS

        def decide(status: str | None) -> None:
            self.environments.lease_mark(instance, mark, status, stands, written, finished_at)

        keeping = [workflow_id for workflow_id, environment in self._environments.items()
                   if self.environments.serves(instance, environment)]
        return LeaseMark(mark, keeping, stands, decide)

    # -- execution -------------------------------------------------------------------------

    def _run(self, attempt: Attempt, context: ExecutionContext | None, heartbeat: Watch) -> Result:
        notes: list[str] = []
        if context is None or context.environment is None:
            return _failed(("config", "the workflow or its environment no longer exists", None), [], notes)
        workflow, publisher, environment = context.workflow, context.publisher, context.environment
        try:
            recipe = self._recipe(workflow)
        except RecipeError as exc:
            return _failed(("config", f"the stored recipe cannot run: {exc}", None), [], notes)
        try:
            auth.authenticate(publisher, attempt.tenant_id)
        except auth.AuthError as exc:
            return _failed(("auth", str(exc), None), _all_skipped(recipe), notes)
        refs = [r for s in recipe.steps for r in s.references()]
        has_sql = any(s.kind == "sql" for s in recipe.steps)
        needs_store = self._run_key is None or has_sql or any(secrets.TENANT_REF.match(r) for r in refs)
        try:
            with self.db.transaction() if needs_store else contextlib.nullcontext() as store:
                handoff = secrets.prepare(
                    store, self._keyring, tenant_id=attempt.tenant_id, run_id=attempt.run_id, attempt=attempt.number,
                    refs=refs, publisher=publisher.email if publisher else "", has_sql=has_sql, now=self.clock.now(),
                    signing_key=self._key, environ=self._environ, run=self._run_key)
        except secrets.SecretError as exc:
            return _failed(("config", exc.message, None), _all_skipped(recipe), notes)
        timeout = timeout_for(workflow.timeout_seconds, context.cadence_seconds)
        # The watchdog measures real elapsed time, whatever clock the ledger uses.
        deadline = time.monotonic() + timeout
        try:
            instance, woke = self.environments.acquire(environment, attempt.tenant_id, self.clock.now())
        except EnvironmentFailed as exc:
            return _failed(("environment", f"environment {environment.name} could not be woken: {exc}", None),
                           _all_skipped(recipe), notes)
        if woke:
            notes.append(f"woke environment {environment.name} in {instance.process.cold_start_ms:.0f} ms")
        else:
            notes.append(f"environment {environment.name} was warm "
                         f"({'its pod' if instance.remote else f'pid {instance.pid}'})")
        healthy = False  # until the steps return normally: an exception leaves the process suspect
        try:
            steps, failure, healthy = self._run_steps(attempt, recipe, instance, deadline, timeout, heartbeat,
                                                      handoff)
        finally:
            if healthy:
                self._warm = instance  # marked warm when the outcome is recorded
            else:
                self.environments.discard(instance, self.clock.now())
        if failure is not None:
            return _failed(failure, steps, notes)
        # A workflow that keeps no outputs has them dropped before the outcome is recorded
        # (`_without_outputs`): they are not measured only to be thrown away.
        outputs = _bounded_outputs(steps) if workflow.keep_outputs else {}
        return Result(AttemptOutcome(status="succeeded", retryable=True, log_tail=_log_tail(steps, notes),
                                     outputs=outputs, rows=reported_rows(steps)), steps)

    def _recipe(self, workflow: Workflow) -> Recipe:
        """The workflow's recipe parsed, again only when the stored one changed (RecipeError: it cannot run).

        A republished recipe is seen at the next attempt: the stored recipe itself is compared,
        not only the workflow's `updated_at`.
        """
        known = self._recipes.get(workflow.id)
        if known is not None and known[0] == workflow.updated_at and known[1] == workflow.recipe:
            return known[2]
        recipe = parse_recipe(workflow.recipe)
        if len(self._recipes) >= MAX_RECIPES:
            self._recipes.clear()
        self._recipes[workflow.id] = (workflow.updated_at, copy.deepcopy(workflow.recipe), recipe)
        return recipe

    def _run_steps(self, attempt: Attempt, recipe: Recipe, instance: Instance, deadline: float, timeout: int,
                   heartbeat: Watch, handoff: secrets.Handoff) -> tuple[list[StepRecord], _Failure | None, bool]:
        """Run each step in order; return the records, the first failure and whether the process is reusable.

        The failure is (category, message, step), as the attempt's outcome records it.
        """
        records: list[StepRecord] = []
        outputs: dict[str, Any] = {}
        not_ok: set[str] = set()
        failure: _Failure | None = None
        should_abort = lambda: heartbeat.lost.is_set() or self.abort.is_set()  # noqa: E731
        for position, step in enumerate(recipe.steps):
            blocker = blocked_by(step, not_ok)
            if blocker is not None:
                records.append(StepRecord(step.name, position, "skipped", log=f"skipped: {blocker} did not succeed"))
                not_ok.add(step.name)
                continue
            remaining = deadline - time.monotonic()
            limit = min(step.timeout_seconds or remaining, remaining)
            record = StepRecord(step.name, position, "failed", started_at=self.clock.now())
            records.append(record)
            # Every value the attempt was given is scrubbed from every step's text, not only its own.
            secret_values = handoff.sensitive
            request = self._request(attempt, step, {d: outputs.get(d) for d in step.depends_on}, handoff,
                                    remote=instance.remote)
            try:
                if limit <= 0:
                    raise WatchdogTimeout()
                if step.kind == "sql":
                    # The server cancels a little before the watchdog would kill the process,
                    # so the process survives warm and the query does not outlive it.
                    request["timeout_ms"] = max(int(max(limit - 0.25, limit * 0.75) * 1000), 1)
                answer = instance.process.call(request, limit, should_abort)
            except WatchdogTimeout:
                record.finished_at = self.clock.now()
                record.status = "timeout"
                record.error = self._timeout_message(step, remaining, timeout)
                failure = failure or ("timeout", record.error, step.name)
                return self._finish_skips(records, recipe, position), failure, False
            except EnvironmentFailed as exc:
                record.finished_at = self.clock.now()
                record.error = sanitize_error(secrets.scrub(str(exc), secret_values))
                failure = failure or ("environment", f"step {step.name}: {record.error}", step.name)
                return self._finish_skips(records, recipe, position), failure, False
            record.finished_at = self.clock.now()
            record.log = _step_log(answer.get("log") or "", secret_values)
            if answer.get("ok"):
                record.status = "succeeded"
                outputs[step.name] = answer.get("output")
                record.output = _small(answer.get("output"), secret_values)
                continue
            not_ok.add(step.name)
            if answer.get("phase") == "timeout":  # the database cancelled the query at the same deadline
                record.status = "timeout"
                record.error = self._timeout_message(step, remaining, timeout)
                failure = failure or ("timeout", record.error, step.name)
                return self._finish_skips(records, recipe, position), failure, True
            category = _category(answer)
            text = secrets.scrub(f"{answer.get('error_type')}: {answer.get('error')}", secret_values)
            record.error = sanitize_error(text)
            failure = failure or (category, f"step {step.name} failed: {text}", step.name)
            if answer.get("phase") == "isolation":
                return self._finish_skips(records, recipe, position), failure, False
        return records, failure, True

    @staticmethod
    def _timeout_message(step: Step, remaining: float, timeout: int) -> str:
        if step.timeout_seconds and step.timeout_seconds < remaining:
            return f"step {step.name} exceeded its timeout of {step.timeout_seconds} s"
        return f"the workflow exceeded its timeout of {timeout} s"

    @staticmethod
    def _finish_skips(records: list[StepRecord], recipe: Recipe, position: int) -> list[StepRecord]:
        for later, step in enumerate(recipe.steps[position + 1:], start=position + 1):
            records.append(StepRecord(step.name, later, "skipped", log="skipped: the attempt was stopped"))
        return records

    @staticmethod
    def _request(attempt: Attempt, step: Step, inputs: dict[str, Any], handoff: secrets.Handoff, *,
                 remote: bool = False) -> dict[str, Any]:
        request: dict[str, Any] = {"op": "run", "tenant_id": attempt.tenant_id, "step": step.request(),
                                   "inputs": inputs}
        if step.kind != "sql" and remote:
            # A pod reads the tenant's secrets from its own Secret: only their names travel.
            tenant_refs = [r for r in step.secrets if r.startswith("secret:")]
            request["environment"] = handoff.step_environment([r for r in step.secrets if r not in tenant_refs])
            request["secret_files"] = {r.split(":", 1)[1]: pods.secret_key(r.split(":", 1)[1]) for r in tenant_refs}
            return request
        if step.kind != "sql":
            request["environment"] = handoff.step_environment(step.secrets)
            return request
        assert step.database is not None
        if remote and step.database.startswith("secret:"):
            request["database_secret"] = pods.secret_key(step.database.split(":", 1)[1])
        else:
            request["database_url"] = handoff.values[step.database]
        request["platform_database"] = handoff.platform_database
        return request


# A leased attempt with what running it needs: its workflow's context and its run key.
_Leased = tuple[Attempt, ExecutionContext | None, auth.RunKey | None]


@dataclass(frozen=True)
class _Ahead:
    """An attempt waiting in a worker's queue: `at`, when its lease was taken or renewed (the
    ledger's clock), `stamp`, when it was leased (monotonic), and whether it was `started`
    (its `started_at` written) or is still leased ahead, to be started by compare-and-set."""

    leased: _Leased
    at: datetime
    stamp: float
    started: bool
# Why an attempt failed: (category, message, the failing step), as its outcome records it.
_Failure = tuple[str, str, str | None]


def _leased(found: tuple[Attempt, datetime], contexts: dict[int, ExecutionContext]) -> _Leased:
    attempt, tick = found
    context = contexts.get(attempt.workflow_id)
    run = None
    if context is not None and context.tenant_name is not None:
        run = auth.RunKey(context.tenant_name, context.workflow.name, tick, attempt.number,
                          context.publisher.email if context.publisher else "")
    return attempt, context, run


def _category(answer: dict[str, Any]) -> str:
    phase = answer.get("phase")
    if phase == "resolve":
        return "config"
    if phase == "connect":
        return "connection"
    if phase == "refused":  # the step reached what no tenant may reach: retrying cannot help
        return "auth"
    if phase == "isolation":
        return "internal"
    if phase == "secret":  # a pod's Secret not yet updated with a new secret: a retry finds it there
        return "environment"
    if answer.get("error_type") in ("ConnectionError", "ConnectionResetError", "ConnectionRefusedError",
                                    "ConnectionAbortedError", "BrokenPipeError"):
        return "connection"
    guess = categorize(str(answer.get("error") or ""))
    # A step's own message decides only between the categories a step can cause.
    return guess if guess in ("connection", "auth", "config", "timeout") else "step_error"


def _failed(failure: _Failure, steps: list[StepRecord], notes: list[str]) -> Result:
    category, message, step = failure
    return Result(
        AttemptOutcome(
            status="failed",
            error_category=category,
            error=sanitize_error(message),
            failed_step=step,
            retryable=is_retryable(category),
            log_tail=_log_tail(steps, notes + [f"failed ({category}): {sanitize_error(message)}"]),
            outputs=_bounded_outputs(steps),
        ),
        steps,
    )


def _without_outputs(result: Result) -> Result:
    """The result with no step or attempt output: a workflow that did not ask keeps none.

    Outputs are customer data; not storing them is the minimisation the workflow file's
    `keep_outputs` controls. Rows were counted from the outputs before, so `expect_rows` still judges.
    """
    for record in result.steps:
        record.output = None
    if not result.outcome.outputs:  # none measured (a success's, see `_run`) or none succeeded: nothing to drop
        return result
    return Result(dataclasses.replace(result.outcome, outputs={}), result.steps)


def _all_skipped(recipe: Recipe) -> list[StepRecord]:
    return [StepRecord(s.name, i, "skipped", log="skipped: the attempt could not start") for i, s in
            enumerate(recipe.steps)]


def _step_log(text: str, secret_values: list[str]) -> str:
    if not text:  # most steps log nothing: no need to scan for secrets
        return ""
    return sanitize_log_tail(secrets.scrub(text, secret_values), lines=STEP_LOG_LINES, limit=STEP_LOG_CHARS)


def _small(output: Any, secret_values: list[str]) -> Any:
    """Keep an output only if it is small JSON without secrets, redacted; larger ones are summarised."""
    if output is None:  # most steps return nothing: nothing to redact, scrub or measure
        return None
    output = redact_value(output)
    text = dumps_str(output)
    if secret_values and secrets.scrub(text, secret_values) != text:
        return {"omitted": "the output contained a secret"}
    if len(text.encode()) > MAX_OUTPUT_BYTES:
        return {"omitted": f"output of {len(text.encode())} bytes is larger than {MAX_OUTPUT_BYTES}"}
    return output


def reported_rows(steps: list[StepRecord]) -> int | None:
    """The rows an attempt committed: the sum of every succeeded step's reported `rows`.

    A sql step reports its row count; a python step reports by returning a mapping
    with a non-negative integer `rows`. None when no step reported a count, so a
    workflow that never reports is told apart from one that reported zero.
    """
    counts = [record.output["rows"] for record in steps
              if record.status == "succeeded" and isinstance(record.output, dict)
              and type(record.output.get("rows")) is int and record.output["rows"] >= 0]
    return sum(counts) if counts else None


def _bounded_outputs(steps: list[StepRecord]) -> dict[str, Any]:
    outputs: dict[str, Any] = {}
    size = 0
    for record in steps:
        if record.status != "succeeded":
            continue
        size += len(dumps_str(record.output))
        if size > MAX_OUTPUTS_BYTES:
            break
        outputs[record.step] = record.output
    return outputs


def _log_tail(steps: list[StepRecord], notes: list[str]) -> str:
    lines = list(notes[:1])
    for record in steps:
        lines.append(f"[{record.step}] {record.status}")
        lines += [f"[{record.step}] {line}" for line in record.log.splitlines()[-5:]]
        if record.error:
            lines.append(f"[{record.step}] error: {record.error}")
    lines += notes[1:]
    return sanitize_log_tail("\n".join(lines))
