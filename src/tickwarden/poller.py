"""The outcome poller: the run ledger is the event stream, claimed with SKIP LOCKED.

One pass:

0. Look, in one read-only statement, whether any finished attempt waits in the
   outcome queue (`outcome_queue`: the statements that finish an attempt write its row);
   when none is, the pass is over. A pass right after one that claimed something
   skips the look: on a busy ledger it would find work nearly every time and only
   add a round trip, and the claim itself says when the work has run out.
1. Claim a batch of finished attempts (`FOR UPDATE SKIP LOCKED` feeding
   `DELETE FROM outcome_queue … RETURNING`; the ledger itself is not written):
   replicas get disjoint batches, and an attempt leaves the queue at claim time, so
   a fault further down is logged once and never reprocessed forever (the next run
   is evaluated afresh).
2. The claim's own statement queues the next attempt of each claimed run now
   `pending_retry`, with its not-before time (the profile's backoff for categories
   time can heal), when its category may be retried and its tick lies in the month of
   `now`, or the one before in a month's first week (`launch_months`: the writes' plan
   holds those months alone, set up by every claim, launching or not): a pass over
   failures with retries left waits for the server once, not once more for the launch.
   Any other such run goes, in the same transaction, to the retry engine (one statement
   for the batch), whose result is read after the evaluation: the statement goes out
   with the evaluation's first read instead of waiting on its own (the evaluation does
   not depend on it, nor it on the evaluation's savepoint: an error it raises still
   fails the whole pass).
3. Evaluate, in the same transaction under a savepoint, the workflows of runs with
   a verdict, once per workflow per batch, set-based: every failure (failed,
   missed), and a success only when its workflow has an open alert to resolve (a
   success cannot open an alert, so the rest need no decision). If the batch
   evaluation faults, the savepoint is rolled back, the claim still commits, and
   the workflows are evaluated one per transaction, each fault logged once.
4. Wake again after `interval_seconds`, or at once when the batch was full (more
   is waiting: a decision must not wait a sleep behind a backlog). The statements that finish an attempt (the worker's
   `finish_attempts`, the reaper's `expire_leases`) notify `poller` as they commit,
   so a retry or a verdict waits for no poll; the interval only bounds the delay
   when a notification is lost.

The transaction of a pass with work runs in pipeline mode (`Database.transaction(pipelined=True)`):
its BEGIN goes out with the claim, the evaluation's savepoint and workflow lock with its
inputs, and the savepoint's release with the COMMIT, so the client waits for the server only
where it reads a result (a pass with a retry and a verdict: four waits instead of nine; with
a retry alone, two: the claim and the commit). The
statements still run one after the other in the order sent, as before.

The pass's transaction runs every statement's generic plan, the plan the server makes once
per connection and keeps (`execution_generic_plans`, transaction-local, sent behind the
BEGIN: a statement more, no round trip more). Under the server's default (`plan_cache_mode`
auto) it planned the evaluation's inputs (`monitoring_evaluation_inputs`), the retry
engine's statement (`ledger_queue_retries`) and the outbox's fan-out
(`outbox_enqueue_notifications`) afresh at every pass that ran them, their fresh plans
estimated cheaper than the kept one: on a ledger of the 16 months a deployment keeps, the
evaluation's inputs took 2.1-3.6 ms of planning against 0.2-0.5 ms of running at every pass.
Each statement of the pass has a generic plan as good as a fresh one: the claim's is the
kept plan already (its text is shaped for it); the evaluation's inputs read the evaluated
workflows' rows by key, whatever their number (see
tests/integration/test_evaluation_plans.py); the writes to the runs and attempts (the
claim's retry launch, the retry engine's, `fail_unretryable`) name their months as
constants, so their plans hold those months' partitions alone; the rest read or write
alerts, the outbox and the workflow locks by key. A statement psycopg has not prepared yet
(its first four executions on a connection) has its generic plan made and dropped at each:
four passes of a new connection. Shaping the texts one by one instead would leave the next
statement added to the pass to be caught the same way.

A pass right after a full batch resumes the claim's walk of the queue's index
after that batch's last attempt, instead of from the start over the dead entries
of every outcome claimed since the last vacuum. The position is only where to look, never
what is owed: an attempt whose commit landed behind it is claimed by the next pass that
walks from the start, which is any pass after a batch that was not full, and at the
latest the `RESUME_LIMIT`-th pass of an unbroken run of full batches.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwarden import alerts, metrics, retries
from tickwarden.db import Database
from tickwarden.categories import NOT_RETRYABLE, is_retryable
from tickwarden.alerts import EvaluationReport

log = logging.getLogger(__name__)

FAILURES = ("failed", "missed")
RESUME_LIMIT = 16  # full batches in a row that may resume the walk before one starts it again
NOT_RETRYABLE_LIST = tuple(sorted(NOT_RETRYABLE))  # sent with every claim: built once


@dataclass
class PollResult:
    claimed: int = 0
    finished_at: list[datetime] = field(default_factory=list)  # of each claimed attempt: decision latency
    retried: list[int] = field(default_factory=list)
    retry_due: list[datetime] = field(default_factory=list)  # when each launched retry may start
    evaluation: EvaluationReport = field(default_factory=EvaluationReport)


class OutcomePoller:
    """Claims finished attempts, launches retries and evaluates verdicts."""

    name = "poller"

    def __init__(self, db: Database, replica_id: str, *, batch_size: int = 500, interval_seconds: float = 30):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.db = db
        self.replica_id = replica_id
        self.batch_size = batch_size
        self.interval = timedelta(seconds=interval_seconds)
        self.last: PollResult = PollResult()
        self._busy = False  # the previous pass claimed something
        self._resume: tuple[datetime, int] | None = None  # (finished_at, id) ending the previous full batch
        self._resumed = 0  # passes in a row that resumed the walk

    def poll(self, now: datetime) -> PollResult:
        """Process one batch and say what happened."""
        result = PollResult()
        if not self._busy:
            with self.db.probe() as store:
                if not store.monitoring.finished_attempts_waiting(now):
                    return result  # the usual idle pass: one read-only statement
        after = self._resume if self._resumed < RESUME_LIMIT else None
        with self.db.transaction(pipelined=True) as store:  # BEGIN rides with the claim, COMMIT with the end
            # Every statement of the pass runs the plan the server made once for it (see the
            # module docstring): sent with the BEGIN, read with the claim, no wait of its own.
            store.execution.send_generic_plans()
            # The claim launches, in its own statement, the retries of the runs it can (see
            # `claim_finished_attempts`); the rest of the runs pending one go as before.
            claimed = store.monitoring.claim_finished_attempts(
                now, self.batch_size, after, not_retryable=NOT_RETRYABLE_LIST, patient=retries.PATIENT_LIST)
            self._busy = bool(claimed)
            result.claimed = len(claimed)
            result.finished_at = [c.finished_at for c in claimed]
            pending = [c for c in claimed if c.run_status == "pending_retry" and not c.retry_sent]
            failed, read_retries = retries.send_retries(
                store,
                sorted({(c.run_id, c.run_scheduled_for) for c in pending if c.run_scheduled_for is not None}),
                now,
                check_retryable=any(not is_retryable(c.run_error_category or "") for c in pending),
            )
            # A failure always needs a decision; a success only when it may resolve an open
            # alert (with no alert open, a success cannot open one: failures since it are none).
            workflows = {
                c.workflow_id
                for c in claimed
                if c.run_status in FAILURES or (c.run_status == "succeeded" and c.alert_open)
            }
            workflows |= {workflow_id for _, workflow_id in failed}
            result.evaluation, redo = alerts.evaluate_batch(store, workflows, now)
            outcome = read_retries()  # came back with the evaluation's first read, when there was one
            outcome = retries.with_claimed(outcome, claimed)
            result.retried = outcome.launched
            result.retry_due = outcome.due
        # Only a committed claim moves the position: a rolled-back batch is walked again.
        full = len(claimed) >= self.batch_size
        self._resume = max((c.finished_at, c.attempt_id) for c in claimed) if full else None
        self._resumed = self._resumed + 1 if full and after is not None else 0
        metrics.current().retries_decided(outcome)
        if redo:
            result.evaluation.merge(alerts.evaluate_each(self.db, redo, now))
        return result

    def run_once(self, now: datetime) -> datetime:
        self.last = self.poll(now)
        if self.last.claimed >= self.batch_size:
            return now
        return now + self.interval
