"""The worker's heartbeat and its poller wake: one heartbeat thread per worker renews each attempt's lease;
the outcome wakes the poller once it has committed, from a transaction of its own."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg

from tests.conftest import TEST_URL
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tickwarden.models import AttemptOutcome
from tickwarden.store.execution import ExecutionRepository
from tickwarden.store.ledger import finish_params, finish_text
from tickwarden.worker import LeaseRenewer, Worker


def test_one_heartbeat_thread_renews_the_lease_of_each_attempt_its_worker_runs(db, clock, monkeypatch):
    renewals: list[tuple[threading.Thread, int]] = []
    renew = LeaseRenewer._renew

    def spy(self, watch):
        renewals.append((threading.current_thread(), watch.attempt.id))
        return renew(self, watch)

    monkeypatch.setattr(LeaseRenewer, "_renew", spy)
    wf = make_runnable(db, clock.now(), [python_step("slow", "hang", params={"seconds": 0.5})])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=3 - i), clock.now()) for i in range(3)]
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET, lease_seconds=0.6)  # renewed every 0.2 s
    try:
        for _ in runs:
            worker.run_once(clock.now())
        serving = worker._heartbeat._thread
    finally:
        worker.close(clock.now())
    with db.transaction() as store:
        attempts = [store.ledger.list_attempts(run.id) for run in runs]
    assert [[a.status for a in found] for found in attempts] == [["succeeded"]] * 3
    assert {attempt_id for _, attempt_id in renewals} == {found[0].id for found in attempts}
    assert {thread for thread, _ in renewals} == {serving}, "one thread served every attempt"


def test_an_idle_heartbeat_thread_ends_and_the_next_attempt_starts_another(db, clock, monkeypatch):
    monkeypatch.setattr(LeaseRenewer, "IDLE_SECONDS", 0.1)
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    try:
        queue_run(db, wf, clock.now() - timedelta(minutes=2), clock.now())
        worker.run_once(clock.now())
        first = worker._heartbeat._thread
        assert first is not None
        first.join(5)
        assert not first.is_alive() and worker._heartbeat._thread is None
        queue_run(db, wf, clock.now() - timedelta(minutes=1), clock.now())
        with db.autocommit() as store:
            [(attempt, _)] = store.execution.exchange("w1", clock.now(), 60, lease=1).leased
        with worker._heartbeat.watching(attempt):
            again = worker._heartbeat._thread
            assert again is not None and again is not first and again.is_alive()
    finally:
        worker.close(clock.now())


def test_the_outcome_wakes_the_poller_once_it_has_committed(db, clock, monkeypatch):
    backends: set[int] = set()  # the server shares notifications between tests: only the worker's count
    notices: list[str] = []  # what the server said to the exchange besides its results
    exchange = ExecutionRepository.exchange

    def spy(self, *args, **kwargs):
        backends.add(self.conn.info.backend_pid)

        def heard(diagnostic: psycopg.errors.Diagnostic) -> None:
            notices.append(f"{diagnostic.severity}: {diagnostic.message_primary}")

        self.conn.add_notice_handler(heard)
        try:
            return exchange(self, *args, **kwargs)
        finally:
            self.conn.remove_notice_handler(heard)

    monkeypatch.setattr(ExecutionRepository, "exchange", spy)
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    run = queue_run(db, wf, clock.now() - timedelta(minutes=1), clock.now())
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    with psycopg.connect(TEST_URL, autocommit=True) as listener:
        listener.execute("LISTEN tickwarden_wake")
        try:
            worker.run_once(clock.now())
        finally:
            worker.close(clock.now())
        listener.execute("SELECT 1")  # the server delivers what committed before it
        notes = [n.payload for n in listener.notifies(timeout=0.5) if n.pid in backends]
    assert notes == ["poller"]
    # the durable part is BEGIN … COMMIT: a COMMIT closing the pipeline's implicit transaction
    # would make the server warn "there is no transaction in progress" in its log at every attempt
    assert notices == []
    with db.transaction() as store:
        assert store.ledger.list_attempts(run.id)[0].status == "succeeded"


def test_the_finish_statement_leaves_the_wake_to_a_caller_that_sends_it_itself(db, clock):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    run = queue_run(db, wf, clock.now() - timedelta(minutes=1), clock.now())
    with db.autocommit() as store:
        [(attempt, _)] = store.execution.exchange("w1", clock.now(), 60, lease=1).leased
    with psycopg.connect(TEST_URL, autocommit=True) as listener:
        listener.execute("LISTEN tickwarden_wake")
        with db.transaction() as store:
            backend = store.conn.info.backend_pid
            finished = [(attempt, AttemptOutcome(status="succeeded"), clock.now())]
            store.ledger._fetch(finish_text(finished), finish_params("w1", finished, wake=False))
        listener.execute("SELECT 1")
        assert [n for n in listener.notifies(timeout=0.5) if n.pid == backend] == []
    with db.transaction() as store:
        assert store.ledger.list_attempts(run.id)[0].status == "succeeded"
