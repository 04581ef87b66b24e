"""The lease is one round trip on one path (`ledger.lease_statements`): the queue's lock tells the writes
which rows and months inside the server, and the busy mark of the process that served the outcome is
decided there, by the first attempt locked, as the worker then records it."""

from __future__ import annotations

from datetime import timedelta

from tests.dbutil import TEST_URL
from tests.execution_helpers import make_runnable, python_step, queue_run
from tests.integration.test_worker_round_trips import Traced, statuses
from tickwarden.db import Database
from tickwarden.store.base import StoreBase
from tickwarden.store.execution import LeaseMark
from tickwarden.store.queries import queries


def test_a_lease_on_its_own_is_one_round_trip_and_a_second_finds_the_rest(db, clock, tmp_path):
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(3)]
    tracer = Traced(tmp_path / "trace")
    with Database(TEST_URL, schema=db.schema, max_size=1, configure=tracer.configure) as traced:
        tracer.reset()
        with traced.autocommit() as store:
            first = store.ledger.lease_attempts_with_ticks("w1", clock.now(), 60, limit=2)
        assert [kind for kind, _ in tracer.sent()] == ["Sync"]  # the lock and the writes: one round trip
        with traced.autocommit() as store:
            second = store.ledger.lease_attempts_with_ticks("w2", clock.now(), 60, limit=2)
            third = store.ledger.lease_attempts_with_ticks("w3", clock.now(), 60, limit=2)
    # oldest first, each attempt once: the second lease is told the rows it locked, not the first's
    assert [a.run_id for a, _ in first] == [runs[0].id, runs[1].id]
    assert [a.run_id for a, _ in second] == [runs[2].id] and third == []
    assert all(tick == a.run_scheduled_for for a, tick in first + second)
    assert statuses(db, [r.id for r in runs]) == [[("running", "w1")], [("running", "w1")], [("running", "w2")]]


def test_the_lease_leaves_an_attempt_another_writer_locked_and_leases_the_rest(db, clock):
    """SKIP LOCKED at both halves: a queued attempt locked elsewhere (a cancel, a Kubernetes lease) is
    neither waited for nor leased; the other attempt the lock found is."""
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(2)]
    with db.transaction() as other:
        other.conn.execute("SELECT 1 FROM attempts WHERE run_id = %s FOR UPDATE", (runs[0].id,))
        with db.autocommit() as store:
            leased = store.ledger.lease_attempts_with_ticks("w1", clock.now(), 60, limit=2)
    assert [a.run_id for a, _ in leased] == [runs[1].id]
    assert statuses(db, [r.id for r in runs]) == [[("queued", None)], [("running", "w1")]]


def _instance(db, wf, clock) -> int:
    with db.transaction() as store:
        row = store.execution.start_environment_instance(
            tenant_id=wf.tenant_id, environment_id=wf.environment_id, worker_id="w1", pid=1, status="busy",
            now=clock.now())
    return row.id


def _row(db, instance_id):
    with db.transaction() as store:
        return store.conn.execute("SELECT status, runs_served, last_used_at FROM environment_instances WHERE id = %s",
                                  (instance_id,)).fetchone()


def test_the_mark_is_decided_by_the_first_attempt_the_lease_locks(db, clock):
    served = make_runnable(db, clock.now(), [python_step("noop", "noop")], name="served")
    other = make_runnable(db, clock.now(), [python_step("noop", "noop")], name="other")
    instance_id = _instance(db, served, clock)
    decided: list[str | None] = []  # what the server wrote, as the exchange hands it to the caller

    def mark(keeping, stands):
        return LeaseMark((instance_id, "warm", 1), keeping, stands,
                         decided.append)

    later = clock.now() + timedelta(seconds=5)
    # The first queued is of a workflow the process serves: busy, counted.
    queue_run(db, served, clock.now() - timedelta(minutes=3), clock.now())
    queue_run(db, other, clock.now() - timedelta(minutes=2), clock.now())
    with db.autocommit() as store:
        exchanged = store.execution.exchange("w1", later, 60, lease=1, instance=mark([served.id], False))
    assert [a.workflow_id for a, _ in exchanged.leased] == [served.id] and decided == ["busy"]
    assert _row(db, instance_id) == ("busy", 1, later)
    # Busy again, its row busy and written recently (`stands`): no write at all, the count waits.
    queue_run(db, served, clock.now() - timedelta(minutes=1), clock.now())  # behind `other`'s
    with db.autocommit() as store:
        store.execution.exchange("w1", later + timedelta(seconds=1), 60, lease=1,
                                 instance=mark([served.id, other.id], True))
    assert _row(db, instance_id) == ("busy", 1, later)
    # The first locked is of a workflow the process does not serve (as the worker last knew it): warm,
    # whether or not the busy row stands.
    with db.autocommit() as store:
        store.execution.exchange("w1", later + timedelta(seconds=2), 60, lease=1, instance=mark([other.id], True))
    assert _row(db, instance_id) == ("warm", 2, later + timedelta(seconds=2))
    # Nothing left to lease: warm.
    with db.autocommit() as store:
        store.execution.exchange("w1", later + timedelta(seconds=3), 60, lease=1, instance=mark([served.id], False))
    assert _row(db, instance_id) == ("warm", 3, later + timedelta(seconds=3))
    assert decided == ["busy", None, "warm", "warm"]


def test_a_lease_inside_a_transaction_sends_the_lock_and_reads_only_the_writes(db, clock, monkeypatch):
    """The lock's rows are the server's (its settings tell the writes what it locked): the lease reads
    no row of them, in a pipelined transaction (the simulator's) as in a plain one."""
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(3)]
    submitted: list[str] = []
    submit = StoreBase._submit_text

    def recorded(store, text, params, **shape):
        submitted.append(text)
        return submit(store, text, params, **shape)

    monkeypatch.setattr(StoreBase, "_submit_text", recorded)
    with db.transaction(pipelined=True) as store:
        first = store.ledger.lease_attempts_with_ticks("w1", clock.now(), 60, limit=2)
    with db.transaction() as store:
        second = store.ledger.lease_attempts_with_ticks("w2", clock.now(), 60, limit=2)
    assert submitted == [queries()["ledger_lease_attempts"]] * 2
    assert [a.run_id for a, _ in first] == [runs[0].id, runs[1].id] and [a.run_id for a, _ in second] == [runs[2].id]
    assert statuses(db, [r.id for r in runs]) == [[("running", "w1")], [("running", "w1")], [("running", "w2")]]
