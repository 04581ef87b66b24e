"""The outcome poller: the run ledger is the event stream, claimed with SKIP LOCKED.

One pass:

0. Look, in one read-only statement, whether any finished attempt is unprocessed;
   when none is, the pass is over. A pass right after one that claimed something
   skips the look: on a busy ledger it would find work nearly every time and only
   add a round trip, and the claim itself says when the work has run out.
1. Claim a batch of finished, unprocessed attempts (`FOR UPDATE SKIP LOCKED`
   feeding `UPDATE … SET processed_at RETURNING`): replicas get disjoint batches,
   and an attempt is marked processed at claim time, so a fault further down is
   logged once and never reprocessed forever (the next run is evaluated afresh).
2. In the same transaction, hand runs now `pending_retry` to the retry engine
   (one statement for the batch), which queues each next attempt with its
   not-before time (the profile's backoff for categories time can heal), and commit.
3. Evaluate, in the same transaction under a savepoint, the workflows of runs with
   a verdict, once per workflow per batch, set-based: every failure (failed,
   missed), and a success only when its workflow has an open alert to resolve (a
   success cannot open an alert, so the rest need no decision). If the batch
   evaluation faults, the savepoint is rolled back, the claim still commits, and
   the workflows are evaluated one per transaction, each fault logged once.
4. Wake again after `interval_seconds`, or after one second when the batch was
   full (more is waiting). The statements that finish an attempt (the worker's
   `finish_attempts`, the reaper's `expire_leases`) notify `poller` as they commit,
   so a retry or a verdict waits for no poll; the interval only bounds the delay
   when a notification is lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwarden import alerts, metrics, retries
from tickwarden.db import Database
from tickwarden.categories import is_retryable
from tickwarden.alerts import EvaluationReport

log = logging.getLogger(__name__)

FAILURES = ("failed", "missed")


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

    def poll(self, now: datetime) -> PollResult:
        """Process one batch and say what happened."""
        result = PollResult()
        if not self._busy:
            with self.db.probe() as store:
                if not store.monitoring.finished_attempts_waiting(now):
                    return result  # the usual idle pass: one read-only statement
        with self.db.transaction() as store:
            claimed = store.monitoring.claim_finished_attempts(now, self.batch_size)
            self._busy = bool(claimed)
            result.claimed = len(claimed)
            result.finished_at = [c.finished_at for c in claimed]
            pending = [c for c in claimed if c.run_status == "pending_retry"]
            outcome = retries.launch_retries(
                store,
                sorted({c.run_id for c in pending}),
                now,
                check_retryable=any(not is_retryable(c.run_error_category or "") for c in pending),
            )
            result.retried = outcome.launched
            result.retry_due = outcome.due
            # A failure always needs a decision; a success only when it may resolve an open
            # alert (with no alert open, a success cannot open one: failures since it are none).
            workflows = {
                c.workflow_id
                for c in claimed
                if c.run_status in FAILURES or (c.run_status == "succeeded" and c.alert_open)
            }
            workflows |= {workflow_id for _, workflow_id in outcome.failed}
            result.evaluation, redo = alerts.evaluate_batch(store, workflows, now)
        metrics.current().retries_decided(outcome)
        if redo:
            result.evaluation.merge(alerts.evaluate_each(self.db, redo, now))
        return result

    def run_once(self, now: datetime) -> datetime:
        self.last = self.poll(now)
        if self.last.claimed >= self.batch_size:
            return now + timedelta(seconds=1)
        return now + self.interval
