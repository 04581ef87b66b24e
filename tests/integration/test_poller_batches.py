"""The poller under a backlog: the next batch at once, a walk that resumes, nothing left behind."""

from __future__ import annotations

import threading
from datetime import timedelta

from tests.dbutil import TEST_URL
from tests.helpers import create_run, lease, make_workflow, tick
from tickwarden import poller as poller_module
from tickwarden.db import Database
from tickwarden.models import AttemptOutcome
from tickwarden.poller import OutcomePoller


def finished(db, workflow, tick, at):
    """A run of `tick` whose first attempt succeeded at `at`; return the attempt's id."""
    run = create_run(db, workflow, tick, at)
    with db.transaction() as store:
        (attempt,) = [a for a in lease(store, "w1", at, 600, limit=100) if a.run_id == run.id]
        store.ledger.finish_attempt(attempt, "w1", AttemptOutcome(status="succeeded"), at)
    return attempt.id


def claimed_ids(db):
    with db.connection() as conn:
        return {r[0] for r in conn.execute(
            "SELECT id FROM attempts a WHERE a.finished_at IS NOT NULL"
            " AND NOT EXISTS (SELECT 1 FROM outcome_queue q WHERE q.attempt_id = a.id)")}


def test_a_pass_after_a_full_batch_looks_past_it_and_the_next_short_pass_claims_what_committed_behind(db, clock):
    wf = make_workflow(db, clock.now(), cron="* * * * *", cadence_seconds=60)
    base = clock.now()
    first = {finished(db, wf, base + timedelta(minutes=k), base + timedelta(minutes=k, seconds=10)) for k in (10, 11)}
    now = base + timedelta(hours=1)
    poller = OutcomePoller(db, "p1", batch_size=2)
    poller.poll(now)
    assert claimed_ids(db) == first
    # an attempt that finished before the batch's but committed after it, and one after it
    behind = finished(db, wf, base + timedelta(minutes=1), base + timedelta(minutes=1, seconds=10))
    ahead = finished(db, wf, base + timedelta(minutes=20), base + timedelta(minutes=20, seconds=10))
    assert poller.poll(now).claimed == 1
    assert claimed_ids(db) == first | {ahead}
    assert poller.poll(now).claimed == 1  # the batch before was short: this walk starts at the beginning
    assert claimed_ids(db) == first | {ahead, behind}


def test_an_unbroken_run_of_full_batches_walks_from_the_start_again_after_the_resume_limit(db, clock, monkeypatch):
    monkeypatch.setattr(poller_module, "RESUME_LIMIT", 1)
    wf = make_workflow(db, clock.now(), cron="* * * * *", cadence_seconds=60)
    base = clock.now()
    for k in range(10, 14):
        finished(db, wf, base + timedelta(minutes=k), base + timedelta(minutes=k, seconds=10))
    now = base + timedelta(hours=1)
    poller = OutcomePoller(db, "p1", batch_size=1)
    poller.poll(now)  # from the start, full
    behind = finished(db, wf, base + timedelta(minutes=1), base + timedelta(minutes=1, seconds=10))
    poller.poll(now)  # resumed, full: the straggler is behind it
    assert behind not in claimed_ids(db)
    poller.poll(now)  # the limit reached: from the start, and the straggler is first there
    assert behind in claimed_ids(db)


def test_replicas_draining_a_backlog_while_outcomes_commit_behind_them_claim_each_once(db, schema, clock):
    wf = make_workflow(db, clock.now(), cron="* * * * *", cadence_seconds=60)
    base = clock.now()
    now = base + timedelta(days=2)
    with db.transaction() as store:
        runs = store.ledger.create_tick_runs([tick(wf, base + timedelta(minutes=k), budget=0) for k in range(300)], base)
        ticks = {r.id: r.scheduled_for for r in runs}
        attempts = lease(store, "w1", base, 3600, limit=1000)
        assert len(attempts) == 300
        for a in attempts[:240]:  # the backlog; the rest finish while the replicas drain it
            store.ledger.finish_attempt(a, "w1", AttemptOutcome(status="succeeded"), ticks[a.run_id] + timedelta(seconds=5))
    late = attempts[240:]
    replicas = [Database(TEST_URL, schema=schema, min_size=1, max_size=2) for _ in range(3)]
    pollers = [OutcomePoller(r, f"p{i}", batch_size=7) for i, r in enumerate(replicas)]
    totals = [0] * len(pollers)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(pollers) + 1)

    def drain(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            idle = 0
            while idle < 3:  # three empty passes in a row, after the writer is done
                claimed = pollers[i].poll(now).claimed
                totals[i] += claimed
                idle = idle + 1 if claimed == 0 and writer_done.is_set() else 0
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    def write() -> None:
        barrier.wait(timeout=30)
        for a in late:  # each finished before every attempt of the backlog: behind any position reached
            with db.transaction() as store:
                store.ledger.finish_attempt(a, "w1", AttemptOutcome(status="succeeded"), base - timedelta(seconds=1))
        writer_done.set()

    writer_done = threading.Event()
    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(pollers))]
    threads.append(threading.Thread(target=write))
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        for r in replicas:
            r.close()
    assert not errors, errors
    assert sum(totals) == 300
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM outcome_queue").fetchone() == (0,)
