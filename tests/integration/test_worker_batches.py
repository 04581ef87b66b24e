"""Leasing attempts in batches: each leased attempt runs once, on the worker that holds it, or goes back to the
queue (given back, or re-queued by the reaper when its worker died); none is lost and none runs twice."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tests.helpers import republish
from tickwarden import worker as worker_module
from tickwarden.environments.pool import BUSY_MARK_SECONDS
from tickwarden.reaper import LeaseReaper
from tickwarden.worker import Worker


@pytest.fixture
def shared_dir():
    """A directory the environment process may write to: it runs as its own user, not the test's."""
    path = Path(tempfile.mkdtemp(prefix="tw-shared-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def attempts_of(db, run_ids):
    with db.transaction() as store:
        return [[(a.status, a.worker_id) for a in store.ledger.list_attempts(run_id)] for run_id in run_ids]


def test_a_batch_is_leased_at_once_and_each_attempt_starts_on_a_full_lease_when_its_turn_comes(db, clock,
                                                                                               monkeypatch):
    monkeypatch.setattr(worker_module, "PREFETCH_WAIT", 600)  # however slow this machine, nothing is given back
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(4)]
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=3)
    try:
        first = clock.now()
        worker.run_once(first)
        assert attempts_of(db, [r.id for r in runs]) == [
            [("succeeded", "w1")], [("running", "w1")], [("running", "w1")], [("queued", None)]]
        # Each pass comes 8 s after the last: more than a third of the 30 s lease after the batch was
        # leased by the third, yet each attempt was started (its lease renewed) by the outcome before it.
        clock.advance(8)
        worker.run_once(clock.now())
        clock.advance(8)
        third_started = clock.now()
        worker.run_once(third_started)
        with db.transaction() as store:
            [third] = store.ledger.list_attempts(runs[2].id)
    finally:
        worker.close(clock.now())
    assert attempts_of(db, [r.id for r in runs]) == [[("succeeded", "w1")]] * 3 + [[("queued", None)]]
    assert third.started_at == third_started - timedelta(seconds=8)  # when the outcome before it was recorded


def test_a_stopping_worker_gives_its_whole_batch_back_and_another_runs_each_once(db, clock):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(4)]
    one = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=4)
    two = Worker(db, "w2", clock=clock, secret_key=SECRET, batch=4)
    try:
        one.run_once(clock.now())
        assert two.run_once(clock.now()) > clock.now()  # all leased to w1: nothing for w2
        one.close(clock.now())
        assert attempts_of(db, [r.id for r in runs[1:]]) == [[("queued", None)]] * 3
        while two.run_once(clock.now()) <= clock.now():
            pass
    finally:
        one.close(clock.now())
        two.close(clock.now())
    assert attempts_of(db, [r.id for r in runs]) == [[("succeeded", "w1")]] + [[("succeeded", "w2")]] * 3


def test_a_dead_workers_batch_is_requeued_free_by_the_reaper_and_each_attempt_runs_once(db, clock):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now(), budget=0) for i in range(4)]
    dead = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=4)
    dead.run_once(clock.now())
    # the first outcome started the second attempt: killed there, w1 holds one started lease and two leased ahead
    with db.transaction() as store:
        assert [store.ledger.list_attempts(r.id)[0].started_at is not None for r in runs] == [True, True, False, False]
    dead.environments.close(clock.now())  # killed: no close(), the three leases it holds are never given back
    LeaseReaper(db).run_once(clock.now() + timedelta(seconds=31))
    with db.transaction() as store:
        store.ledger.queue_retries([(r.id, r.scheduled_for) for r in runs], clock.now() + timedelta(seconds=32))
    alive = Worker(db, "w2", clock=clock, secret_key=SECRET, batch=4)
    try:
        while alive.run_once(clock.now() + timedelta(seconds=33)) <= clock.now() + timedelta(seconds=33):
            pass
    finally:
        alive.close(clock.now())
    # the started one was lost and re-queued without spending its run's (empty) budget; the two never
    # started went back to the queue as they were, no attempt lost; each ran once, on w2
    assert attempts_of(db, [r.id for r in runs]) == (
        [[("succeeded", "w1")], [("lost", "w1"), ("succeeded", "w2")]] + [[("succeeded", "w2")]] * 2)
    with db.transaction() as store:
        assert {store.ledger.get_run(r.id).status for r in runs} == {"succeeded"}


def test_a_lease_taken_ahead_and_given_back_by_the_reaper_is_skipped_by_its_worker_not_run(db, clock,
                                                                                            monkeypatch):
    monkeypatch.setattr(worker_module, "PREFETCH_WAIT", 600)  # the heartbeat gives nothing back itself
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(4)]
    one = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=4)
    executed: list[tuple[str, int]] = []
    original = Worker.execute

    def spy(self, attempt, *rest, **keywords):
        executed.append((self.worker_id, attempt.run_id))
        return original(self, attempt, *rest, **keywords)

    monkeypatch.setattr(Worker, "execute", spy)
    leased_at = clock.now()
    try:
        one.run_once(leased_at)  # leases the four, runs the first; its outcome starts the second
        clock.advance(8)
        one.run_once(clock.now())  # runs the second; its outcome starts the third, on a lease renewed from now
        # The fourth, leased ahead and never started, is not renewed: w1's database was away, say, longer
        # than the lease. The reaper gives it back, and w2 leases it.
        reaper = LeaseReaper(db)
        reaper.run_once(leased_at + timedelta(seconds=31))
        assert reaper.last_reaped == [] and len(reaper.last_requeued) == 1
        with db.autocommit() as store:
            [(taken, _)] = store.execution.exchange("w2", leased_at + timedelta(seconds=31), 30, lease=1).leased
        assert taken.run_id == runs[3].id
        clock.advance(8)
        one.run_once(clock.now())  # runs the third; starting the fourth with its outcome fails: skipped
        assert one.run_once(clock.now()) > clock.now()  # nothing left to run
    finally:
        one.close(clock.now())
    assert executed == [("w1", r.id) for r in runs[:3]]
    assert attempts_of(db, [r.id for r in runs]) == [[("succeeded", "w1")]] * 3 + [[("running", "w2")]]
    with db.transaction() as store:
        [fourth] = store.ledger.list_attempts(runs[3].id)
    assert fourth.started_at == leased_at + timedelta(seconds=31)  # w2's start, untouched by w1


def test_attempts_leased_behind_a_long_attempt_go_back_to_the_queue_for_an_idle_worker(db, clock, monkeypatch):
    monkeypatch.setattr(worker_module, "PREFETCH_WAIT", 0.2)
    slow = make_runnable(db, clock.now(), [python_step("slow", "hang", params={"seconds": 8})], name="slow")
    quick = make_runnable(db, clock.now(), [python_step("noop", "noop")], name="quick")
    long_run = queue_run(db, slow, clock.now() - timedelta(minutes=10), clock.now())
    short_runs = [queue_run(db, quick, clock.now() - timedelta(minutes=9 - i), clock.now()) for i in range(2)]
    busy = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=3)
    idle = Worker(db, "w2", clock=clock, secret_key=SECRET, batch=3)
    thread = threading.Thread(target=busy.run_once, args=(clock.now(),))
    try:
        thread.start()
        while attempts_of(db, [long_run.id]) != [[("running", "w1")]]:  # w1 leases the three first
            time.sleep(0.01)
        done = 0
        while done < 2 and thread.is_alive():
            if idle.run_once(clock.now()) <= clock.now():
                done += 1
            else:
                time.sleep(0.05)
        assert done == 2 and thread.is_alive()  # w1 still runs the slow step
        thread.join()
    finally:
        busy.close(clock.now())
        idle.close(clock.now())
    assert attempts_of(db, [long_run.id] + [r.id for r in short_runs]) == [
        [("succeeded", "w1")], [("succeeded", "w2")], [("succeeded", "w2")]]


def test_threads_leasing_in_batches_run_every_attempt_once_and_lose_none(db, clock, shared_dir):
    tally = shared_dir / "tally"
    wf = make_runnable(db, clock.now(), [python_step("tally", "tally", params={"path": str(tally)})])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=60 - i), clock.now()) for i in range(40)]
    pool = [Worker(db, f"w{i}", clock=clock, secret_key=SECRET, batch=3) for i in range(4)]

    def drain(worker: Worker) -> None:
        while worker.run_once(clock.now()) <= clock.now():
            pass

    threads = [threading.Thread(target=drain, args=(w,)) for w in pool]
    try:
        [t.start() for t in threads]
        [t.join() for t in threads]
    finally:
        for w in pool:
            w.close(clock.now())
    executions = Counter(tally.read_text().splitlines())
    assert len(executions) == 40 and set(executions.values()) == {1}
    per_run = attempts_of(db, [r.id for r in runs])
    assert all(len(attempts) == 1 and attempts[0][0] == "succeeded" for attempts in per_run)
    assert len({attempts[0][1] for attempts in per_run}) > 1  # shared out, not drained by one


def instance_statuses(db):
    with db.transaction() as store:
        return [i.status for i in store.execution.list_environment_instances(include_stopped=True)]


def test_the_environment_stays_busy_between_attempts_that_use_it_and_goes_warm_when_the_next_does_not(db, clock):
    served = make_runnable(db, clock.now(), [python_step("noop", "noop")], name="served")
    unauthorised = make_runnable(db, clock.now(), [python_step("noop", "noop")], name="orphan", with_publisher=False)
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now())
            for i, wf in enumerate([served, served, unauthorised])]
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=3)
    try:
        worker.run_once(clock.now())
        assert instance_statuses(db) == ["busy"]  # kept for the next attempt, of the same environment
        worker.run_once(clock.now())
        assert instance_statuses(db) == ["busy"]  # the next one uses the same environment too
        worker.run_once(clock.now())  # which never reaches it: it fails as unauthorised first
        assert instance_statuses(db) == ["warm"]
    finally:
        worker.close(clock.now())
    assert attempts_of(db, [r.id for r in runs]) == [[("succeeded", "w1")]] * 2 + [[("failed", "w1")]]
    with db.transaction() as store:
        [instance] = store.execution.list_environment_instances(include_stopped=True)
    assert instance.status == "stopped" and instance.runs_served == 2


def instance_row(db):
    with db.transaction() as store:
        [instance] = store.execution.list_environment_instances(include_stopped=True)
    return instance


@pytest.mark.parametrize("batch", [5, 1])
def test_a_process_busy_from_attempt_to_attempt_writes_its_row_only_when_a_minute_has_passed(db, clock, batch):
    # At a batch of 5 the attempts are leased ahead; at a batch of 1 each outcome leases the next, and the
    # busy mark that lease decides is not written while the row says busy already (it was written at
    # every lease before: every attempt at a batch of 1).
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(5)]
    # a lease long enough for the attempts leased ahead to outlast the clock's minute
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=batch, lease_seconds=600)
    try:
        for _ in range(3):
            worker.run_once(clock.now())
            # kept busy for the next attempt: its row is left as it was written when it woke
            row = instance_row(db)
            assert (row.status, row.runs_served) == ("busy", 0)
        clock.advance(BUSY_MARK_SECONDS)
        worker.run_once(clock.now())  # the first outcome a minute after the last write writes the runs since
        row = instance_row(db)
        assert (row.status, row.runs_served, row.last_used_at) == ("busy", 4, clock.now())
        worker.run_once(clock.now())  # the last (at a batch of 1 its lease finds nothing): warm, with its count
        row = instance_row(db)
        assert (row.status, row.runs_served) == ("warm", 5)
    finally:
        worker.close(clock.now())
    assert attempts_of(db, [r.id for r in runs]) == [[("succeeded", "w1")]] * 5
    assert (instance_row(db).status, instance_row(db).runs_served) == ("stopped", 5)


def test_at_a_batch_of_one_the_process_stays_busy_for_the_attempt_its_outcome_leased_and_a_wrong_guess_is_undone(
        db, clock):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(3)]
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=1)
    try:
        worker.run_once(clock.now())
        # The outcome leased the next attempt, of a workflow last seen with this environment: kept busy for it,
        # so its acquire writes nothing.
        assert instance_statuses(db) == ["busy"]
        with db.transaction() as store:
            other = store.catalog.apply_environment(wf.tenant_id, "other", None, 600, clock.now()).row
            republish(store, wf, clock.now(), environment_id=other.id)
        worker.run_once(clock.now())  # its outcome leases an attempt that now runs in the other environment
        assert instance_statuses(db) == ["warm"]  # not left busy for an attempt it will not serve
        worker.run_once(clock.now())
    finally:
        worker.close(clock.now())
    assert attempts_of(db, [r.id for r in runs]) == [[("succeeded", "w1")]] * 3
    with db.transaction() as store:
        instances = store.execution.list_environment_instances(include_stopped=True)
    assert sorted((i.environment_id, i.runs_served, i.status) for i in instances) == sorted(
        [(wf.environment_id, 2, "stopped"), (other.id, 1, "stopped")])
