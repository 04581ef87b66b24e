"""The retry engine: the next attempt of a run that still has budget for its tick.

The budget is per tick, captured on the run from the profile when the tick was
recorded, with the backoff before each retry; the worker (`finish_attempts`) and
the lease reaper (`expire_leases`) already compare the attempt number with it and
write `pending_retry` only while budget remains. The engine's job is to launch the
next attempt of those runs, once, however many pollers saw them: `queue_retries`
moves each run from pending_retry to queued with a compare-and-set and inserts
attempt n+1 under UNIQUE (run, number), with its not-before time.

The error's category chooses between patience and speed:

- a category that time can heal (`PATIENT_CATEGORIES`: a refused connection, an
  environment that died, a lost worker, a timeout, tickwarden's own fault) waits
  the run's backoff, counted from the failed attempt's finish, so a warehouse that
  is down for ten minutes is ridden out instead of paged;
- a deterministic error in customer code (`step_error`) is retried at once: waiting
  would not change the code, only delay the page, while an immediate retry still
  absorbs a flaky step;
- a category that can never succeed on retry (config, auth: `categories.NOT_RETRYABLE`)
  gets its verdict `failed` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from tickwarden.categories import NOT_RETRYABLE

if TYPE_CHECKING:
    from tickwarden.store import Store
    from tickwarden.store.monitoring import ClaimedAttempt

PATIENT_CATEGORIES = frozenset({"connection", "environment", "lost", "timeout", "internal"})
PATIENT_LIST = tuple(sorted(PATIENT_CATEGORIES))  # as the statements take them


@dataclass
class RetryOutcome:
    launched: list[int] = field(default_factory=list)  # run ids with a new queued attempt
    due: list[datetime] = field(default_factory=list)  # when each launched attempt may start
    failed: list[tuple[int, int]] = field(default_factory=list)  # (run, workflow) failed for good


def launch_retries(
    store: Store, runs: Sequence[tuple[int, datetime]], now: datetime, *, check_retryable: bool = True
) -> RetryOutcome:
    """Queue the next attempt of every given run (id, tick) still pending a retry, in the caller's transaction.

    The tick names the run's month: the statements touch only those months' partitions.
    `check_retryable=False` skips the look for non-retryable categories when the
    caller already knows there is none (the poller reads each run's category at claim).
    """
    return send_retries(store, runs, now, check_retryable=check_retryable)[1]()


def send_retries(
    store: Store, runs: Sequence[tuple[int, datetime]], now: datetime, *, check_retryable: bool = True
) -> tuple[list[tuple[int, int]], Callable[[], RetryOutcome]]:
    """`launch_retries`, with the queueing sent now and read later, in the same transaction.

    Returns the runs (run, workflow) failed for good, known at once (their workflows need a
    verdict), and what reads the whole outcome. The unretryable runs are failed first, and
    read; the queueing of the rest is sent after them. In pipeline mode it then goes out with
    the caller's next read (the poller's evaluation inputs) instead of waiting on its own. The
    caller reads it before its transaction ends: an error it raised fails the transaction.
    A pair, not a class of its own: the alert path copies its values into as few shapes as it can.
    """
    if not runs:
        return [], RetryOutcome
    failed = store.monitoring.fail_unretryable(runs, sorted(NOT_RETRYABLE), now) if check_retryable else []
    done = {run_id for run_id, _ in failed}
    read = store.ledger.submit_queue_retries([r for r in runs if r[0] not in done], now, PATIENT_LIST)

    def outcome() -> RetryOutcome:
        queued = read()
        return RetryOutcome([a.run_id for a in queued], [a.queued_at for a in queued], failed)

    return failed, outcome


def with_claimed(outcome: RetryOutcome, claimed: Sequence[ClaimedAttempt]) -> RetryOutcome:
    """`outcome` with the retries the poller's claim launched itself (`ClaimedAttempt.retry_sent`).

    Their runs are disjoint from the outcome's (the claim's are not sent again); a run is
    counted once however many of its attempts the claim returned. Those first, in claim order.
    """
    seen: set[int] = set()
    launched: list[int] = []
    due: list[datetime] = []
    for c in claimed:
        if c.retry_attempt_id is not None and c.run_id not in seen and c.retry_queued_at is not None:
            seen.add(c.run_id)
            launched.append(c.run_id)
            due.append(c.retry_queued_at)
    if not launched:
        return outcome
    return RetryOutcome(launched + outcome.launched, due + outcome.due, outcome.failed)
