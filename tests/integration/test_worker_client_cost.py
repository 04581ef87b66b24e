"""The worker's own work per warm attempt: what it keeps between attempts, and what it must still see anew."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest

from tests.dbutil import TEST_URL
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tests.helpers import republish
from tickwarden import worker as worker_module
from tickwarden.db import DedicatedDatabase
from tickwarden.environments.process import EnvironmentProcess
from tickwarden.worker import Worker


def _warm_then_watched(worker: Worker, clock, watch, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Three attempts to warm the environment (and prepare each statement of the exchange at its
    first use), then `watch()` patches what is counted and three more attempts run; the worker is closed."""
    try:
        for _ in range(3):
            assert worker.run_once(clock.now()) <= clock.now()
        watch()
        for _ in range(3):
            assert worker.run_once(clock.now()) <= clock.now()
    finally:
        monkeypatch.undo()
        worker.close(clock.now())


def test_a_warm_attempt_sends_its_statements_on_cursors_kept_from_the_attempts_before(db, clock, monkeypatch):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    for i in range(10):
        queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0)
    # One attempt a lease: each outcome leases the next attempt, and each attempt marks its process busy.
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    created = []
    real_cursor = psycopg.Connection.cursor

    def cursor(self, *args, **kwargs):
        created.append(1)
        return real_cursor(self, *args, **kwargs)

    _warm_then_watched(worker, clock, lambda: monkeypatch.setattr(psycopg.Connection, "cursor", cursor), monkeypatch)
    # A fresh cursor would choose every parameter's adapter again: the outcome's arrays cost more than its SQL.
    assert created == []
    with db.transaction() as store:
        assert store.conn.execute("SELECT count(*) FROM runs WHERE status = 'succeeded'").fetchone()[0] == 6


def test_a_warm_attempt_sends_its_whole_exchange_without_psycopgs_execute(db, clock, monkeypatch):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    for i in range(8):
        queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0)
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=8)
    executed: list[str] = []
    real_execute = psycopg.Cursor.execute

    def execute(cur, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        executed.append(str(query).split()[0])
        return real_execute(cur, query, params, **kwargs)

    # watched: BEGIN, the outcome, the start of the next, COMMIT and the wake, none through `execute`
    _warm_then_watched(worker, clock, lambda: monkeypatch.setattr(psycopg.Cursor, "execute", execute), monkeypatch)
    # `execute` flushes what it sends: BEGIN, COMMIT and the wake each went to the server on its own.
    assert executed == []
    with db.transaction() as store:
        assert store.conn.execute("SELECT count(*) FROM runs WHERE status = 'succeeded'").fetchone()[0] == 6


@pytest.mark.parametrize("dedicated", [False, True])
def test_a_statement_that_failed_is_not_answered_by_its_cursor_again(db, dedicated):
    text = "SELECT 10 / %(d)s AS x"
    database = DedicatedDatabase(TEST_URL, schema=db.schema) if dedicated else db
    try:
        with pytest.raises(psycopg.errors.DivisionByZero):
            with database.transaction() as store:
                store.ledger._fetch(text, {"d": 0})
        for d in (5, 2):
            with database.transaction() as store:
                assert store.ledger._fetch(text, {"d": d}) == [{"x": 10 // d}]
    finally:
        if dedicated:
            database.close()


def test_a_recipe_is_parsed_once_and_a_republished_one_is_run_by_the_attempts_leased_after_it(db, clock, monkeypatch):
    wf = make_runnable(db, clock.now(), [python_step("first", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0) for i in range(4)]
    parsed = []
    real_parse = worker_module.parse_recipe

    def parse(raw):
        parsed.append([step["name"] for step in raw["steps"]])
        return real_parse(raw)

    monkeypatch.setattr(worker_module, "parse_recipe", parse)
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    try:
        for _ in range(2):
            assert worker.run_once(clock.now()) <= clock.now()
        # Republished at the same instant: its `updated_at` is the one the worker saw.
        with db.transaction() as store:
            republish(store, wf, clock.now(), recipe={"steps": [python_step("second", "fail")]})
        for _ in range(2):
            assert worker.run_once(clock.now()) <= clock.now()
    finally:
        worker.close(clock.now())
    assert parsed == [["first"], ["second"]]
    with db.transaction() as store:
        steps = [[s.step for s in store.api.list_run_steps(run.id)] for run in runs]
    # The third was leased, with its workflow as it was then, by the second one's outcome.
    assert steps == [["first"], ["first"], ["first"], ["second"]]


def test_short_attempts_do_not_wake_the_heartbeat_thread(db, clock):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    for i in range(6):
        queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0)
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)

    class Counted(threading.Condition):
        notified = 0

        def notify_all(self) -> None:
            Counted.notified += 1
            super().notify_all()

    worker._heartbeat._cond = Counted()
    try:
        for _ in range(6):
            assert worker.run_once(clock.now()) <= clock.now()
        thread = worker._heartbeat._thread
    finally:
        worker.close(clock.now())
    # Each lease is renewed only a third of its length after its attempt starts: none of these came near.
    assert Counted.notified == 0
    assert thread is not None and thread.is_alive()


def test_a_workflow_that_keeps_no_outputs_has_none_measured_or_copied_out_of_its_outcome(db, clock, monkeypatch):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")], keep_outputs=False)
    for i in range(6):
        queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0)
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=8)
    measured: list[int] = []
    copied: list[int] = []
    real_bounded, real_replace = worker_module._bounded_outputs, worker_module.dataclasses.replace

    def bounded(steps):  # type: ignore[no-untyped-def]
        measured.append(1)
        return real_bounded(steps)

    def replace(obj, **changes):  # type: ignore[no-untyped-def]
        copied.append(1)
        return real_replace(obj, **changes)

    def watch() -> None:
        monkeypatch.setattr(worker_module, "_bounded_outputs", bounded)
        monkeypatch.setattr(worker_module.dataclasses, "replace", replace)

    _warm_then_watched(worker, clock, watch, monkeypatch)
    # Its outputs were dropped before the write anyway: no JSON of them, no copy of the outcome without them.
    assert measured == [] and copied == []
    with db.transaction() as store:
        recorded = store.conn.execute("SELECT a.outputs, s.output FROM attempts a JOIN attempt_steps s "
                                      "ON s.attempt_id = a.id").fetchall()
    assert recorded == [({}, None)] * 6


def test_a_workflow_that_keeps_its_outputs_still_has_them_measured_and_recorded(db, clock, monkeypatch):
    wf = make_runnable(db, clock.now(), [python_step("first", "number", params={"value": 21})], keep_outputs=True)
    queue_run(db, wf, clock.now(), clock.now())
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    measured: list[int] = []
    real_bounded = worker_module._bounded_outputs

    def bounded(steps):  # type: ignore[no-untyped-def]
        measured.append(1)
        return real_bounded(steps)

    monkeypatch.setattr(worker_module, "_bounded_outputs", bounded)
    try:
        assert worker.run_once(clock.now()) <= clock.now()
    finally:
        monkeypatch.undo()
        worker.close(clock.now())
    assert measured == [1]
    with db.transaction() as store:
        assert store.conn.execute("SELECT outputs FROM attempts").fetchall() == [({"first": {"value": 21}},)]


def test_a_warm_attempt_looks_at_its_process_once(db, clock, monkeypatch):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    for i in range(8):
        queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0)
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET, batch=4)
    looks: list[int] = []
    real_alive = EnvironmentProcess.alive

    def alive(process: EnvironmentProcess) -> bool:
        looks.append(process.pid)
        return real_alive(process)

    # Each look is a `wait4`: the janitor's and the release's were the acquire's again, moments apart.
    _warm_then_watched(worker, clock, lambda: monkeypatch.setattr(EnvironmentProcess, "alive", alive), monkeypatch)
    assert len(looks) == 3 and len(set(looks)) == 1
    with db.transaction() as store:
        assert store.conn.execute("SELECT count(*) FROM runs WHERE status = 'succeeded'").fetchone()[0] == 6
