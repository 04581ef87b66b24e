"""The outcome poller: the run ledger is the event stream, claimed with SKIP LOCKED.

One pass:

1. Claim a batch of finished, unprocessed attempts (`FOR UPDATE SKIP LOCKED`
   feeding `UPDATE … SET processed_at RETURNING`): replicas get disjoint batches,
   and an attempt is marked processed at claim time, so a fault further down is
   logged once and never reprocessed forever (the next run is evaluated afresh).
2. In the same transaction, hand runs now `pending_retry` to the retry engine
   (one statement for the batch) and commit.
3. Evaluate the workflows of runs with a verdict (succeeded, failed, missed), once
   per workflow per batch, set-based (`evaluator.evaluate`: one transaction for the
   batch, and one per workflow if that fails).
4. Wake again after `interval_seconds`, or after one second when the batch was
   full (more is waiting).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwarden import evaluator, retries
from tickwarden.db import Database
from tickwarden.evaluator import EvaluationReport

log = logging.getLogger(__name__)

VERDICTS = ("succeeded", "failed", "missed")


@dataclass
class PollResult:
    claimed: int = 0
    retried: list[int] = field(default_factory=list)
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

    def poll(self, now: datetime) -> PollResult:
        """Process one batch and say what happened."""
        result = PollResult()
        with self.db.transaction() as store:
            claimed = store.claim_finished_attempts(now, self.batch_size)
            result.claimed = len(claimed)
            pending = sorted({c.run_id for c in claimed if c.run_status == "pending_retry"})
            outcome = retries.launch_retries(store, pending, now)
        result.retried = outcome.launched
        workflows = {c.workflow_id for c in claimed if c.run_status in VERDICTS}
        workflows |= {workflow_id for _, workflow_id in outcome.failed}
        if workflows:
            result.evaluation = evaluator.evaluate(self.db, workflows, now)
        return result

    def run_once(self, now: datetime) -> datetime:
        self.last = self.poll(now)
        if self.last.claimed >= self.batch_size:
            return now + timedelta(seconds=1)
        return now + self.interval
