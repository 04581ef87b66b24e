"""A database that goes away: pooled connections are replaced, results are kept, probes answer fast."""

from __future__ import annotations

import logging
import select
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg.pq import Trace

from tests.helpers import lease
from tests.dbutil import TEST_URL
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tests.privatepg import PrivatePostgres, available
from tickwarden.api.main import create_app
from tickwarden.clock import VirtualClock
from tickwarden.db import Database
from tickwarden.errors import DatabaseUnavailable
from tickwarden.worker import Worker

START = datetime(2026, 11, 30, 1, 55, tzinfo=UTC)


@pytest.fixture
def private():
    # The outage needs a server the test may stop: a missing one is a broken machine, not a pass.
    assert available(), "the PostgreSQL 15 server binaries (/usr/lib/postgresql/15/bin) are not installed"
    server = PrivatePostgres()
    yield server
    server.destroy()


@pytest.fixture
def private_db(private):
    db = Database(private.url, min_size=1, max_size=4, timeout=1)  # an outage outlasts the pool's wait
    db.migrate(START)
    yield db
    db.close()


def test_it_replaces_a_pooled_connection_the_server_dropped(schema):
    db = Database(TEST_URL, schema=schema, min_size=1, max_size=1, application_name=f"tw-drop-{schema}")
    try:
        with db.connection() as conn:
            conn.execute("SELECT 1")
        with psycopg.connect(TEST_URL, autocommit=True) as admin:
            killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                   "WHERE application_name = %s", (f"tw-drop-{schema}",)).fetchone()[0]
        assert killed == 1
        time.sleep(0.2)
        with db.connection() as conn:  # the dead connection is noticed when lent, not by the caller
            assert conn.execute("SELECT 2").fetchone() == (2,)
    finally:
        db.close()


def readable(socket: int, timeout: float) -> bool:
    look = select.poll()
    look.register(socket, select.POLLIN)
    return bool(look.poll(timeout * 1000))


def test_a_sound_pooled_connection_is_lent_without_a_round_trip(schema, tmp_path):
    db = Database(TEST_URL, schema=schema, min_size=1, max_size=1)
    trace = tmp_path / "trace"
    try:
        with trace.open("w") as sink:
            with db.connection() as conn:
                conn.pgconn.trace(sink.fileno())
                conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
                pid = conn.info.backend_pid
            with db.connection() as conn:  # checked by a look at its socket: nothing was sent
                assert conn.info.backend_pid == pid
                conn.pgconn.untrace()
        assert [line for line in trace.read_text(errors="replace").splitlines() if line.startswith("F\t")] == []
    finally:
        db.close()


def test_every_pooled_connection_the_server_terminated_is_replaced_when_lent(schema):
    db = Database(TEST_URL, schema=schema, min_size=2, max_size=2)
    try:
        with db.connection() as first, db.connection() as second:
            pids = [first.info.backend_pid, second.info.backend_pid]
            sockets = [first.pgconn.socket, second.pgconn.socket]
        with psycopg.connect(TEST_URL, autocommit=True) as admin:
            assert admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid = ANY(%s)",
                                 (pids,)).fetchone() == (2,)
            deadline = time.monotonic() + 10
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
                assert time.monotonic() < deadline, "the terminated backends did not exit"
                time.sleep(0.01)
        assert all(readable(socket, 5) for socket in sockets)  # the server's goodbye, then its end of file
        # Both borrows get a sound connection, without raising: the dead ones are noticed when lent.
        with db.connection() as first, db.connection() as second:
            assert first.execute("SELECT 1").fetchone() == (1,) and second.execute("SELECT 2").fetchone() == (2,)
            assert not {first.info.backend_pid, second.info.backend_pid} & set(pids)
    finally:
        db.close()


def test_a_pooled_connection_with_a_harmless_message_to_read_is_checked_in_full_and_kept(schema):
    channel = f"probe_{schema}"
    db = Database(TEST_URL, schema=schema, min_size=1, max_size=1)
    try:
        with db.connection() as conn:
            conn.execute(f"LISTEN {channel}")
            pid, socket = conn.info.backend_pid, conn.pgconn.socket
        with psycopg.connect(TEST_URL, autocommit=True) as other:
            other.execute(f"NOTIFY {channel}")
        assert readable(socket, 5)
        with db.connection() as conn:  # the full check reads the notification; the connection is sound
            assert conn.info.backend_pid == pid
            conn.execute(f"UNLISTEN {channel}")
        with db.connection() as conn:
            assert conn.info.backend_pid == pid and not readable(socket, 0)
    finally:
        db.close()


def test_the_worker_records_a_finished_attempt_once_the_database_is_back(private, private_db):
    clock = VirtualClock(START)
    workflow = make_runnable(private_db, clock.now(), [python_step("slow", "hang", params={"seconds": 1.5})])
    run = queue_run(private_db, workflow, clock.now(), clock.now(), budget=0)
    worker = Worker(private_db, "w1", clock=clock, secret_key=SECRET, lease_seconds=60)
    done = threading.Thread(target=worker.run_once, args=(clock.now(),))
    try:
        done.start()
        time.sleep(0.7)  # leased, and the step is under way
        private.stop("immediate")
        time.sleep(2.5)  # the step finished while the database was away
        private.start()
        done.join(30)
        assert not done.is_alive()
        with private_db.transaction() as store:
            recorded = store.ledger.get_run(run.id)
            attempts = store.ledger.list_attempts(run.id)
        assert recorded.status == "succeeded"
        assert [a.status for a in attempts] == ["succeeded"]
    finally:
        worker.environments.close(clock.now())


def test_readyz_answers_503_at_once_while_the_database_is_down(private, private_db, caplog):
    app = create_app(private_db, VirtualClock(START))
    with TestClient(app) as client:
        assert client.get("/readyz").status_code == 200
        private.stop("immediate")
        with caplog.at_level(logging.DEBUG):
            for _ in range(3):
                began = time.monotonic()
                answer = client.get("/readyz")
                assert answer.status_code == 503
                assert time.monotonic() - began < 3
            with pytest.raises(DatabaseUnavailable), private_db.transaction():
                pass
        outage_lines = [r for r in caplog.records if "cannot be reached" in r.getMessage() and r.levelno >= logging.ERROR]
        assert len(outage_lines) == 1
        assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.WARNING)
        private.start()
        deadline = time.monotonic() + 20
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "readyz did not recover"
            time.sleep(0.3)
        assert private_db.outage_since is None


def test_the_reaper_leaves_leases_that_ran_out_while_the_server_was_down_to_their_workers(private, private_db):

    from tests.helpers import create_run, make_workflow
    from tickwarden.clock import WallClock
    from tickwarden.reaper import LeaseReaper

    now = WallClock().now()
    workflow = make_workflow(private_db, now)
    create_run(private_db, workflow, now, now, budget=0)
    with private_db.transaction() as store:
        [attempt] = lease(store, "w1", now, 5)
    private.restart("immediate")
    reaper = LeaseReaper(private_db, resume_grace_seconds=30, server_restarts=True)
    restarted = WallClock().now()
    for _ in range(50):  # the first borrow after the restart may find the old connection gone
        try:
            wake = reaper.run_once(restarted + timedelta(seconds=10))
            break
        except DatabaseUnavailable:
            time.sleep(0.2)
    assert reaper.last_reaped == [] and wake <= restarted + timedelta(seconds=31)
    with private_db.transaction() as store:
        assert store.ledger.renew_lease(attempt, "w1", restarted + timedelta(seconds=11), 5)  # the worker is back in time
    reaped = []
    for seconds in (25, 40, 55):  # passes 15 s apart, as the service makes them
        reaper.run_once(restarted + timedelta(seconds=seconds))
        reaped += [(seconds, r.attempt_id) for r in reaper.last_reaped]
    assert reaped == [(55, attempt.id)]  # past the grace, a silent worker is lost


def test_a_reaper_pass_that_began_before_the_server_came_back_leaves_the_leases_alone(private, private_db):
    """A pass takes `now` first and its connection after: one that began while the server was
    down gets it only once the server is back, with a `now` from before the server's start.
    The leases that ran out by then ran out in the outage too."""

    from tests.helpers import create_run, make_workflow
    from tickwarden.clock import WallClock
    from tickwarden.reaper import LeaseReaper

    now = WallClock().now()
    workflow = make_workflow(private_db, now)
    create_run(private_db, workflow, now - timedelta(seconds=10), now - timedelta(seconds=10), budget=0)
    with private_db.transaction() as store:
        [attempt] = lease(store, "w1", now - timedelta(seconds=10), 5)  # ran out 5 s before `now`
    private.restart("immediate")
    reaper = LeaseReaper(private_db, resume_grace_seconds=30, server_restarts=True)
    for _ in range(50):  # the first borrow after the restart may find the old connection gone
        try:
            wake = reaper.run_once(now)  # the pass's clock was read before the server started
            break
        except DatabaseUnavailable:
            time.sleep(0.2)
    assert reaper.last_reaped == [] and wake > now
    with private_db.transaction() as store:
        assert store.ledger.renew_lease(attempt, "w1", WallClock().now(), 5)  # its worker renews in time


def test_a_worker_pass_during_an_outage_comes_back_later_without_a_traceback(private, private_db, caplog):

    clock = VirtualClock(START)
    worker = Worker(private_db, "w1", clock=clock, secret_key=SECRET, poll_seconds=2)
    private.stop("immediate")
    with caplog.at_level(logging.INFO):
        assert worker.run_once(clock.now()) == clock.now() + timedelta(seconds=2)
        assert worker.run_once(clock.now()) == clock.now() + timedelta(seconds=2)
    assert not any(r.exc_info for r in caplog.records)
    assert len([r for r in caplog.records if "cannot be reached" in r.getMessage()]) == 1
    private.start()


def test_leases_a_worker_could_not_give_back_during_an_outage_are_given_back_by_its_next_pass(private, private_db):

    clock = VirtualClock(START)
    workflow = make_runnable(private_db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(private_db, workflow, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(3)]
    worker = Worker(private_db, "w1", clock=clock, secret_key=SECRET, batch=3)

    def attempts() -> list[list[str]]:
        with private_db.transaction() as store:
            return [[a.status for a in store.ledger.list_attempts(r.id)] for r in runs]

    try:
        worker.run_once(clock.now())  # runs the first; the second (started by its outcome) and third wait
        private.stop("immediate")
        worker.give_back()  # its heartbeat's give-back, say, while the database is away
        private.start()
        # The next pass that reaches the database gives them back, without waiting for the
        # leases to run out and the reaper; here w1 itself then leases and runs them.
        for _ in range(50):  # the first borrows after the restart may find old connections gone
            worker.run_once(clock.now())
            if attempts() == [["succeeded"]] * 3:
                break
            time.sleep(0.1)
        assert attempts() == [["succeeded"]] * 3
    finally:
        worker.close(clock.now())


def test_a_lease_the_worker_acts_on_survives_a_crash_of_the_database(private, private_db):
    # A commit that does not wait for the WAL flush stays in the server's memory until the
    # WAL writer's next round: here up to 10 s, and no full-page image fills a WAL page and
    # wakes it earlier. An immediate stop in that window loses such commits.
    with psycopg.connect(private.url, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        admin.execute("ALTER SYSTEM SET full_page_writes = off")
        admin.execute("SELECT pg_reload_conf()")
    clock = VirtualClock(START)
    workflow = make_runnable(private_db, clock.now(), [python_step("slow", "hang", params={"seconds": 2})])
    worker = Worker(private_db, "w1", clock=clock, secret_key=SECRET, lease_seconds=60)
    try:
        first = queue_run(private_db, workflow, clock.now(), clock.now(), budget=0)
        worker.run_once(clock.now())  # its environment is warm now: the next lease is the pass's only write
        run = queue_run(private_db, workflow, clock.now() + timedelta(minutes=1), clock.now(), budget=0)
        done = threading.Thread(target=worker.run_once, args=(clock.now(),))
        done.start()
        time.sleep(0.7)  # leased, and the step is under way
        private.stop("immediate")
        private.start()
        # Had the lease been lost, the attempt would be back in the queue for any worker to
        # run a second time while this one runs it, and this one's result refused.
        with psycopg.connect(private.url) as conn:
            held = conn.execute("SELECT status, worker_id FROM attempts WHERE run_id = %s", (run.id,)).fetchall()
        assert held == [("running", "w1")]
        done.join(30)
        assert not done.is_alive()
        with private_db.transaction() as store:
            assert [a.status for a in store.ledger.list_attempts(first.id)] == ["succeeded"]
            assert [a.status for a in store.ledger.list_attempts(run.id)] == ["succeeded"]
    finally:
        worker.environments.close(clock.now())
