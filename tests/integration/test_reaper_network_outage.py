"""The lease reaper after a network outage the server itself never noticed.

The server keeps running, so its start time says nothing; a reaper pass caught by the
outage waits for its answer instead of failing. Only the reaper's own looks can tell:
each test times them with an injected monotonic clock.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from datetime import datetime, timedelta

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.dbutil import TEST_URL
from tests.helpers import create_run, lease, make_workflow
from tickwarden.db import Database
from tickwarden.reaper import BLIND_SECONDS, INTERVAL_SECONDS, LATE_SECONDS, RESUME_GRACE_SECONDS, LeaseReaper

LEASE = 30  # the worker's default lease: it renews every 10 s


class Monotonic:
    """A monotonic clock the test moves: it stands still unless a pass is made to wait."""

    def __init__(self) -> None:
        self.value = 1000.0
        self.steps: list[float] = []  # how far each next reading moves it first

    def __call__(self) -> float:
        if self.steps:
            self.value += self.steps.pop(0)
        return self.value


class Cut:
    """A TCP relay to the test server that can stop carrying bytes without closing anything.

    While cut, what either end sends is held, not refused: both ends wait, as across a
    network outage. Restored, the held bytes go through and the sessions carry on.
    """

    def __init__(self) -> None:
        target = conninfo_to_dict(TEST_URL)
        self.target = (str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = make_conninfo(TEST_URL, host="127.0.0.1", port=str(self.listener.getsockname()[1]))
        self.flowing = threading.Event()
        self.flowing.set()
        self.waiting = threading.Semaphore(0)  # released once per message held at the cut
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._carry, args=(source, sink), daemon=True).start()

    def _carry(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):  # either end closed: the relay of this direction is over
            while data := source.recv(65536):
                if not self.flowing.is_set():
                    self.waiting.release()
                    self.flowing.wait()
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):  # already shut down by the other direction
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.flowing.set()
        self.listener.close()
        for end in self.sockets:
            end.close()


@pytest.fixture
def cut():
    relay = Cut()
    yield relay
    relay.close()


def pass_or_error(reaper: LeaseReaper, now: datetime) -> object:
    try:
        return reaper.run_once(now)
    except Exception as exc:  # reported by the test's assertion on the answers
        return exc


def running(db: Database, run_id: int) -> list[tuple[str, str | None]]:
    with db.transaction() as store:
        return [(a.status, a.worker_id) for a in store.ledger.list_attempts(run_id)]


def test_a_network_outage_the_reapers_waited_through_loses_no_live_worker(db, schema, clock, cut):
    """Two reaper replicas pass every 15 s; a 25 s network outage catches both passes mid-way.

    Neither pass fails and the server never restarted, yet the worker could renew at none
    of its beats in the outage, so its lease ran out before the outage ended. Both passes
    answered 25 s after they began: each replica holds, the worker renews in time, and
    only once it falls silent afterwards is its attempt lost, once.
    """
    now = clock.now()
    workflow = make_workflow(db, now)
    run = create_run(db, workflow, now, now, budget=0)
    with db.transaction() as store:
        [attempt] = lease(store, "w1", now, LEASE)  # expires at now + 30
    monotonic = Monotonic()
    databases = [Database(cut.url, schema=schema, min_size=1, max_size=2) for _ in range(2)]
    try:
        reapers = [LeaseReaper(d, monotonic=monotonic) for d in databases]
        for seconds in (-45, -30, -15, 0):  # watching the database since well before
            for reaper in reapers:
                reaper.run_once(now + timedelta(seconds=seconds))
        cut.flowing.clear()  # at now + 12: the beats at now + 20 and now + 30 cannot renew
        answers: list[object] = []  # what each pass caught by the outage returned, or raised
        passes = [threading.Thread(target=lambda r=r, i=i: answers.append(pass_or_error(r, now + timedelta(seconds=15 + i))))
                  for i, r in enumerate(reapers)]
        for thread in passes:
            thread.start()
        for _ in passes:  # each pass's look is held at the cut
            assert cut.waiting.acquire(timeout=10)
        assert all(thread.is_alive() for thread in passes)
        monotonic.value += 25  # the outage lasts until now + 40
        cut.flowing.set()
        for thread in passes:
            thread.join(10)
            assert not thread.is_alive()
        assert sorted(answers) == [now + timedelta(seconds=30), now + timedelta(seconds=31)]  # neither failed
        for reaper in reapers:  # the lease expired 10 s ago; the worker's next beat is at now + 40
            assert reaper.run_once(now + timedelta(seconds=40)) <= now + timedelta(seconds=55)
            assert reaper.last_reaped == []
        assert running(db, run.id) == [("running", "w1")]
        with db.transaction() as store:  # the beat at now + 40 renews: the worker is alive
            assert store.ledger.renew_lease(attempt, "w1", now + timedelta(seconds=40), LEASE)
        # Then it falls silent: its lease runs out at now + 70 and is reaped once it is late.
        reaped = []
        for seconds in range(55, 101, INTERVAL_SECONDS):
            for reaper in reapers:
                reaper.run_once(now + timedelta(seconds=seconds))
                reaped += [(seconds, r.attempt_id) for r in reaper.last_reaped]
        assert reaped == [(85, attempt.id)]
        assert running(db, run.id) == [("lost", "w1")]
    finally:
        for d in databases:
            d.close()


def reaper_with_lease(db, clock) -> tuple[LeaseReaper, Monotonic]:
    """A reaper on the wall clock's rules beside one attempt whose lease expires at now + 30."""
    now = clock.now()
    create_run(db, make_workflow(db, now), now, now, budget=0)
    with db.transaction() as store:
        lease(store, "w1", now, LEASE)
    monotonic = Monotonic()
    return LeaseReaper(db, monotonic=monotonic), monotonic


def test_a_reaper_that_looked_steadily_reaps_a_lease_once_it_is_late(db, clock):
    reaper, _ = reaper_with_lease(db, clock)
    now = clock.now()
    late = LEASE + LATE_SECONDS
    for seconds in range(late):  # looks a second apart, from the lease's start
        reaper.run_once(now + timedelta(seconds=seconds))
        assert reaper.last_reaped == []
    reaper.run_once(now + timedelta(seconds=late))
    assert len(reaper.last_reaped) == 1


def test_a_first_look_holds_for_the_grace(db, clock):
    reaper, _ = reaper_with_lease(db, clock)
    first = clock.now() + timedelta(seconds=LEASE + 10)
    assert reaper.run_once(first) == first + timedelta(seconds=INTERVAL_SECONDS)
    assert reaper.last_reaped == []
    for seconds in range(INTERVAL_SECONDS, RESUME_GRACE_SECONDS, INTERVAL_SECONDS):
        reaper.run_once(first + timedelta(seconds=seconds))
        assert reaper.last_reaped == []
    reaper.run_once(first + timedelta(seconds=RESUME_GRACE_SECONDS))
    assert len(reaper.last_reaped) == 1


def test_looks_further_apart_than_the_blind_span_hold(db, clock):
    """An outage may have fit between two looks: nothing but their distance says it did not."""
    reaper, _ = reaper_with_lease(db, clock)
    now = clock.now()
    for seconds in range(-60, 16, INTERVAL_SECONDS):
        reaper.run_once(now + timedelta(seconds=seconds))
    after = now + timedelta(seconds=15 + BLIND_SECONDS + 1)  # past the lease's expiry and late
    assert reaper.run_once(after) == after + timedelta(seconds=INTERVAL_SECONDS)
    assert reaper.last_reaped == []
    reaper.run_once(after + timedelta(seconds=15))
    assert reaper.last_reaped == []
    reaper.run_once(after + timedelta(seconds=RESUME_GRACE_SECONDS))
    assert len(reaper.last_reaped) == 1


def test_a_look_that_waited_holds_from_its_answer(db, clock):
    reaper, monotonic = reaper_with_lease(db, clock)
    now = clock.now()
    for seconds in range(-60, 1, INTERVAL_SECONDS):
        reaper.run_once(now + timedelta(seconds=seconds))
    monotonic.steps = [0, 20]  # the pass at now + 15 waits 20 s for its look's answer
    assert reaper.run_once(now + timedelta(seconds=15)) == now + timedelta(seconds=30)
    # Its next pass, due at now + 30, runs at once at now + 35: the lease has been expired
    # for 5 s, but the look that waited might have hidden a 20 s outage: held until now + 65.
    for seconds in (35, 50, 64):
        reaper.run_once(now + timedelta(seconds=seconds))
        assert reaper.last_reaped == []
    reaper.run_once(now + timedelta(seconds=65))
    assert len(reaper.last_reaped) == 1
