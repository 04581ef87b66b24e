"""The worker's per-attempt cost: one held connection, one commit, the next lease with the outcome; and what a
prefetched lease becomes when its worker stops or dies."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from psycopg.pq import Trace

from tests.dbutil import TEST_URL
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tickwarden.db import Database
from tickwarden.errors import DatabaseUnavailable
from tickwarden.reaper import LeaseReaper
from tickwarden.worker import Worker


class Traced:
    """Every message the client sends on the database's connections, from libpq's own trace."""

    def __init__(self, path: Path):
        self.path = path
        self.file = path.open("w")

    def configure(self, conn) -> None:
        conn.pgconn.trace(self.file.fileno())
        conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)

    def reset(self) -> None:
        self.file.flush()
        self.path.write_text("")

    def statements(self) -> int:
        """Statements executed: each extended-protocol `Bind` (prepared or not) and each simple `Query`."""
        self.file.flush()
        return sum(1 for line in self.path.read_text(errors="replace").splitlines()
                   if line.split("\t")[0] == "F" and line.split("\t")[2:3] in (["Bind"], ["Query"]))

    def messages(self) -> list[tuple[str, str]]:
        """(message, text) of each message the client sent."""
        self.file.flush()
        out = []
        for line in self.path.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[0] == "F":
                out.append((parts[2], parts[3] if len(parts) > 3 else ""))
        return out

    def sent(self) -> list[tuple[str, str]]:
        """(message, text) of each Query or Sync: each one a round trip."""
        return [(message, text) for message, text in self.messages() if message in ("Query", "Sync")]


@pytest.fixture
def traced(db, tmp_path):
    tracer = Traced(tmp_path / "trace")
    with Database(TEST_URL, schema=db.schema, max_size=4, configure=tracer.configure) as traced_db:
        traced_db.pool.wait()  # see the `db` fixture: one connection unless a second borrower needs one
        yield traced_db, tracer


def statuses(db, run_ids):
    with db.transaction() as store:
        return [[(a.status, a.worker_id) for a in store.ledger.list_attempts(run_id)] for run_id in run_ids]


def test_a_warm_attempt_pays_no_connection_check_and_one_commit_and_leases_the_next_with_its_outcome(
        db, clock, traced):
    traced_db, tracer = traced
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0) for i in range(10)]
    worker = Worker(traced_db, "w1", clock=clock, secret_key=SECRET)
    try:
        # wake the environment, and let psycopg prepare each statement (at its 5th use, a round trip once)
        for _ in range(6):
            worker.run_once(clock.now())
        tracer.reset()
        for _ in range(3):
            assert worker.run_once(clock.now()) <= clock.now()
        sent = tracer.sent()
    finally:
        worker.close(clock.now())
    per_attempt = len(sent) / 3
    checks = sum(1 for kind, text in sent if kind == "Query" and text.strip() == '""')
    explicit = sum(1 for kind, text in sent if kind == "Query" and text.strip() != '""')
    # the held connection's check is a look at its socket, no query (one round trip each before); no BEGIN,
    # COMMIT or SET
    assert checks == 0 and explicit == 0, sent
    # the outcome with its steps and the next lease with its context in one exchange of one round trip: the
    # queue's rows locked, then leased with their months told inside the server, so the writes' plans hold
    # those months' partitions only; the process kept busy by the server's decision, for the attempt leased
    # (2 before, the lease's writes and the mark in a second round trip after the lock; 3 before that, with a
    # busy mark of its own; 2 before that, the lease in the outcome's round trip; 3 before that, with the
    # check; 9 before that: BEGIN, each statement, COMMIT; 17 before that)
    assert per_attempt == 1, sent
    # every run ran once; the attempt leased with the ninth outcome was given back when the worker stopped
    assert [[status for status, _ in attempts] for attempts in statuses(db, [r.id for r in runs])] == [["succeeded"]] * 9 + [
        ["queued"]]


def warm_batches(db, clock, traced):
    """Sixteen no-op attempts run by one worker leasing 4 at a time; the tracer holds what the
    second eight sent (the first eight woke the environment, prepared the statements and ended a
    batch). Returns the runs, and the round trips and statements of those eight, counted before
    the worker stops (stopping gives back the attempt leased ahead)."""
    traced_db, tracer = traced
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0) for i in range(16)]
    worker = Worker(traced_db, "w1", clock=clock, secret_key=SECRET, batch=4)
    try:
        for _ in range(8):
            worker.run_once(clock.now())
        tracer.reset()
        for _ in range(8):
            assert worker.run_once(clock.now()) <= clock.now()
        sent, statements = tracer.sent(), tracer.statements()
    finally:
        worker.close(clock.now())
    return runs, sent, statements


def test_a_batch_of_warm_attempts_pays_no_busy_mark(db, clock, traced):
    runs, sent, _ = warm_batches(db, clock, traced)
    # per attempt the outcome's exchange (the connection's check sends nothing), the lease of a batch of 4 and
    # the mark that keeps the process busy for its first attempt riding in it (8 * 1 + 2 before, the lease's
    # writes in a second round trip; 8 * 1 + 2 + 2 before that, with a busy mark of its own per batch; 8 * 1 + 2
    # before that, the lease in one)
    assert len(sent) == 8 * 1, sent
    assert [[status for status, _ in attempts] for attempts in statuses(db, [r.id for r in runs])] == [
        ["succeeded"]] * 16


def test_a_warm_attempts_step_rows_are_written_by_its_outcomes_statement(db, clock, traced):
    runs, _, statements = warm_batches(db, clock, traced)
    # per attempt: BEGIN, the switch to plans made once, the outcome with its step rows, the next attempt's
    # start, COMMIT and the poller's wake; besides them the batches' leases, each its lock, writes, contexts
    # and the mark the server decides (one round trip: sent whatever the lock finds, so the last outcome's
    # lease, which finds nothing, sends its writes and contexts too, and the mark of a process that stays busy
    # for the next attempt runs and writes no row; 51 before, with the lease in two round trips, the writes,
    # contexts and mark sent only as the lock's rows asked; 52 before that: a busy-to-busy mark with the outcome that
    # leased the next batch; 44 before that: no switch, each plan made afresh; 50 before that: a busy-to-busy
    # mark with each outcome; 52 before that, a busy mark per batch besides the warm one; 60 before that: the
    # step rows had a statement of their own)
    assert statements == 54, statements
    with db.transaction() as store:
        written = store.conn.execute(
            "SELECT a.run_id, s.step, s.status FROM attempt_steps s JOIN attempts a ON a.id = s.attempt_id "
            "ORDER BY a.run_id").fetchall()
    assert [tuple(row) for row in written] == [(r.id, "noop", "succeeded") for r in runs]


def test_an_idle_poll_is_one_round_trip_that_opens_no_transaction_and_a_due_attempt_is_then_leased(
        db, clock, traced):
    traced_db, tracer = traced
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    worker = Worker(traced_db, "w1", clock=clock, secret_key=SECRET)
    try:
        for _ in range(6):  # let psycopg prepare the look (at its 5th use, a round trip once)
            assert worker.run_once(clock.now()) > clock.now()
        tracer.reset()
        for _ in range(3):
            assert worker.run_once(clock.now()) > clock.now()
        sent = tracer.sent()
        # one Sync per poll: no BEGIN, no COMMIT, no lock (2 before: the locking scan in a transaction, then
        # its COMMIT)
        assert [kind for kind, _ in sent] == ["Sync"] * 3, sent
        run = queue_run(db, wf, clock.now() - timedelta(minutes=1), clock.now(), budget=0)
        assert worker.run_once(clock.now()) <= clock.now()
    finally:
        worker.close(clock.now())
    assert statuses(db, [run.id]) == [[("succeeded", "w1")]]


def test_a_stopping_worker_gives_its_prefetched_lease_back_and_another_runs_it_once(db, clock):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    first, second = (queue_run(db, wf, clock.now() - timedelta(minutes=2 - i), clock.now()) for i in range(2))
    one = Worker(db, "w1", clock=clock, secret_key=SECRET)
    two = Worker(db, "w2", clock=clock, secret_key=SECRET)
    try:
        one.run_once(clock.now())
        assert statuses(db, [first.id, second.id]) == [[("succeeded", "w1")], [("running", "w1")]]
        assert two.run_once(clock.now()) > clock.now()  # leased to w1: nobody else takes it
        one.close(clock.now())
        assert statuses(db, [second.id]) == [[("queued", None)]]
        two.run_once(clock.now())
        assert statuses(db, [second.id]) == [[("succeeded", "w2")]]
    finally:
        one.close(clock.now())
        two.close(clock.now())


def test_a_dead_workers_prefetched_lease_is_requeued_free_by_the_reaper_and_runs_once(db, clock):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    first, second = (queue_run(db, wf, clock.now() - timedelta(minutes=2 - i), clock.now(), budget=0)
                     for i in range(2))
    dead = Worker(db, "w1", clock=clock, secret_key=SECRET)
    dead.run_once(clock.now())
    dead.environments.close(clock.now())  # killed: no close(), its prefetched lease is never given back
    LeaseReaper(db).run_once(clock.now() + timedelta(seconds=31))
    with db.transaction() as store:
        store.ledger.queue_retries([(second.id, second.scheduled_for)], clock.now() + timedelta(seconds=32))
    alive = Worker(db, "w2", clock=clock, secret_key=SECRET)
    try:
        alive.run_once(clock.now() + timedelta(seconds=33))
    finally:
        alive.close(clock.now())
    # the lost lease did not spend the run's (empty) budget, and the step ran once, on w2
    assert statuses(db, [second.id]) == [[("lost", "w1"), ("succeeded", "w2")]]
    with db.transaction() as store:
        assert store.ledger.get_run(second.id).status == "succeeded"


def test_a_prefetched_lease_too_old_to_start_on_is_given_back_not_run(db, clock):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    first, second = (queue_run(db, wf, clock.now() - timedelta(minutes=2 - i), clock.now()) for i in range(2))
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    try:
        worker.run_once(clock.now())
        later = clock.now() + timedelta(seconds=11)  # more than a third of the 30 s lease went by
        assert worker._take_next(later) is None
        assert statuses(db, [second.id]) == [[("queued", None)]]
        worker.run_once(later)
        assert statuses(db, [second.id]) == [[("succeeded", "w1")]]
    finally:
        worker.close(clock.now())


def test_a_held_connection_serves_its_thread_commits_like_the_pool_and_is_dropped_when_broken(db):
    seen: dict[str, int] = {}
    with db.hold():
        with db.connection() as conn:
            seen["a"] = id(conn)
            conn.execute("CREATE TABLE held_probe (n int)")
        with db.connection() as conn:
            seen["b"] = id(conn)
            assert conn.execute("SELECT count(*) FROM held_probe").fetchone()[0] == 0  # committed
        with pytest.raises(ZeroDivisionError), db.connection() as conn:
            conn.execute("INSERT INTO held_probe VALUES (1)")
            raise ZeroDivisionError
        other: list[int] = []
        thread = threading.Thread(target=lambda: other.append(_borrowed_id(db)))
        thread.start()
        thread.join()
        with db.connection() as conn:
            assert conn.execute("SELECT count(*) FROM held_probe").fetchone()[0] == 0  # rolled back
            seen["c"] = id(conn)
            pid = conn.info.backend_pid
        with db.pool.connection() as admin:  # another connection, outside the hold, kills the held one
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(DatabaseUnavailable), db.connection() as conn:
            conn.execute("SELECT 1")
        with db.connection() as conn:  # the rest of the hold borrows a sound one from the pool
            assert conn.execute("SELECT 1").fetchone()[0] == 1
    assert seen["a"] == seen["b"] == seen["c"] and other and other[0] != seen["a"]


def _borrowed_id(db) -> int:
    with db.connection() as conn:
        return id(conn)


def test_a_warm_attempts_writes_run_plans_made_once_that_still_touch_their_month_alone(db, clock):
    """The outcome's, the start's and the lease's statements are planned once per connection (generic
    plans), not at every attempt; the months they bind as scalars prune those plans when they start."""
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0) for i in range(12)]
    with Database(TEST_URL, schema=db.schema, min_size=1, max_size=1) as one:
        worker = Worker(one, "w1", clock=clock, secret_key=SECRET, batch=4)
        try:
            for _ in range(12):
                assert worker.run_once(clock.now()) <= clock.now()
        finally:
            worker.close(clock.now())
        with one.connection() as conn:
            prepared = conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").fetchall()

    def plans(marker: str) -> tuple[int, int]:
        [(generic, custom)] = [(generic, custom) for text, generic, custom in prepared if marker in text]
        return generic, custom

    # psycopg prepares a statement at its fifth use: from then on each runs its one plan
    for marker in ("WITH reported AS", "SET started_at"):  # ledger_finish_attempts, execution_start_attempt
        generic, custom = plans(marker)
        assert generic > 0 and custom == 0, (marker, prepared)
    assert [[status for status, _ in attempts] for attempts in statuses(db, [r.id for r in runs])] == [
        ["succeeded"]] * 12


def test_a_new_connection_prepares_the_exchanges_statements_at_their_first_use(db, clock):
    """Not at psycopg's fifth: before it, each execution made the statement's generic plan over every
    month afresh and threw it away (four whole plans of each per new connection, each several
    attempts' worth of the server's work)."""
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=20 - i), clock.now(), budget=0) for i in range(3)]
    with Database(TEST_URL, schema=db.schema, min_size=1, max_size=1) as one:
        worker = Worker(one, "w1", clock=clock, secret_key=SECRET, batch=1)
        try:
            for _ in range(2):  # each outcome's exchange leases the next attempt
                assert worker.run_once(clock.now()) <= clock.now()
        finally:
            worker.close(clock.now())
        with one.connection() as conn:
            prepared = conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").fetchall()
    # ledger_finish_attempts (run twice) and ledger_lease_attempts (three times): prepared at once, every
    # execution on the plan made once (before, neither was prepared yet: absent from the list)
    for marker in ("WITH reported AS", "WITH locked AS"):
        [(generic, custom)] = [(generic, custom) for text, generic, custom in prepared if marker in text]
        assert generic >= 2 and custom == 0, (marker, prepared)
    assert [[status for status, _ in attempts] for attempts in statuses(db, [r.id for r in runs])][:2] == [
        ["succeeded"]] * 2
