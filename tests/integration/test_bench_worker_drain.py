"""The worker benchmark times a drain as the peers are timed: its own attempts, first start to last end."""

from datetime import UTC, datetime, timedelta

import pytest

from benchmarks import worker
from tickwarden.clock import VirtualClock

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


def _finish(db, queued_at: datetime, first_start: datetime, step: timedelta) -> None:
    """Finish the runs queued at `queued_at`, their attempts one `step` apart from `first_start`, each lasting a step."""
    with db.transaction() as store:
        store.conn.execute(
            """UPDATE attempts a SET status = 'succeeded', started_at = %(first)s + (n.k - 1) * %(step)s,
                                     finished_at = %(first)s + n.k * %(step)s
                 FROM (SELECT id, row_number() OVER (ORDER BY id) AS k FROM attempts WHERE queued_at = %(at)s) n
                WHERE a.id = n.id""",
            {"first": first_start, "step": step, "at": queued_at})
        store.conn.execute(
            """UPDATE runs r SET status = 'succeeded', started_at = a.started_at, finished_at = a.finished_at
                 FROM attempts a WHERE a.run_id = r.id AND a.run_scheduled_for = r.scheduled_for AND a.queued_at = %s""",
            (queued_at,))


def test_the_rate_is_of_the_drains_attempts_alone_over_their_span_in_the_ledger(db):
    clock = VirtualClock(NOW)
    wf = worker.setup(db, clock)
    earlier = worker.queue(db, wf, clock, 5)
    _finish(db, earlier, NOW - timedelta(minutes=1), timedelta(seconds=10))  # a slow drain before: not counted
    clock.advance(1)
    since = worker.queue(db, wf, clock, 8)
    _finish(db, since, NOW + timedelta(seconds=2), timedelta(milliseconds=250))

    # 8 attempts from the first one's start to the last one's end, 2 s: the queueing second before is left out
    assert worker.drained_rate(db, since, 8) == pytest.approx(4.0)
    assert not worker.pending(db)


def test_a_drain_that_left_attempts_unfinished_has_no_rate(db):
    clock = VirtualClock(NOW)
    wf = worker.setup(db, clock)
    since = worker.queue(db, wf, clock, 3)
    assert worker.pending(db)
    with pytest.raises(RuntimeError, match="the drain finished 0 attempts of the 3 queued"):
        worker.drained_rate(db, since, 3)
