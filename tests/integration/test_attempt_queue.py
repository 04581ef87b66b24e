"""The queue of queued attempts (migration 0031): a row exactly while its attempt is queued, whatever moves it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.helpers import create_run, lease, make_workflow, tick
from tickwarden import catalog
from tickwarden.db import Database
from tickwarden.erasure import delete_tenant
from tickwarden.models import AttemptOutcome

NOW = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)


def queue_and_queued(db: Database) -> tuple[list[tuple], list[tuple]]:
    """The queue's rows and the queued attempts, each as (attempt id, tick, run, workflow, tenant, queued_at)."""
    with db.transaction() as store:
        queue = store.conn.execute(
            "SELECT attempt_id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at"
            " FROM attempt_queue ORDER BY attempt_id").fetchall()
        queued = store.conn.execute(
            "SELECT id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at"
            " FROM attempts WHERE status = 'queued' ORDER BY id").fetchall()
    return queue, queued


def assert_in_step(db: Database, count: int) -> None:
    queue, queued = queue_and_queued(db)
    assert queue == queued and len(queue) == count


def test_the_queue_holds_exactly_the_queued_attempts_through_every_move(db: Database) -> None:
    wf = make_workflow(db, NOW)
    first = create_run(db, wf, NOW, NOW)
    second = create_run(db, wf, NOW + timedelta(days=1), NOW)
    with db.transaction() as store:
        manual = store.ledger.create_manual_run(tenant_id=wf.tenant_id, workflow_id=wf.id, retry_budget=1,
                                                deadline_at=NOW + timedelta(hours=3), now=NOW, requested_by="x")
    assert_in_step(db, 3)   # the ticker's two first attempts and the manual run's

    with db.transaction() as store:
        leased = lease(store, "w1", NOW, 60, limit=2)
    assert [a.run_id for a in leased] == [first.id, second.id]
    assert_in_step(db, 1)   # leased: out of the queue

    with db.transaction() as store:
        assert store.execution.release_attempts([leased[1]], "w1") == [leased[1].id]
    assert_in_step(db, 2)   # given back by its worker: in the queue again

    with db.transaction() as store:
        finished = store.ledger.finish_attempt(leased[0], "w1", AttemptOutcome(
            status="failed", error_category="connection", error="refused", retryable=True), NOW)
        assert finished.run_status == "pending_retry"
        retries = store.ledger.queue_retries([(first.id, first.scheduled_for)], NOW + timedelta(minutes=5))
    assert [a.number for a in retries] == [2]
    assert_in_step(db, 3)   # the retry queued

    with db.transaction() as store:
        store.conn.execute("UPDATE attempts SET queued_at = %s WHERE id = %s",
                           (NOW + timedelta(minutes=9), retries[0].id))
    assert_in_step(db, 3)   # a queued attempt's due time moves its queue row's

    catalog.cancel(db, manual.id, NOW, "oncall@acme.test")
    assert_in_step(db, 2)   # cancelled with its run: out of the queue

    with db.transaction() as store:
        store.conn.execute("DELETE FROM runs WHERE id = %s", (second.id,))
    assert_in_step(db, 1)   # deleted with its run (the cascade)

    with db.transaction() as store:
        delete_tenant(store, wf.tenant_id)
    assert_in_step(db, 0)   # erased with its tenant


def test_a_lease_expired_ahead_goes_back_to_the_queue_and_a_lost_one_does_not(db: Database) -> None:
    wf = make_workflow(db, NOW)
    create_run(db, wf, NOW, NOW)
    create_run(db, wf, NOW + timedelta(days=1), NOW)
    with db.autocommit() as store:
        exchanged = store.execution.exchange("w1", NOW, 60, lease=2)
    started, ahead = [a for a, _ in exchanged.leased]
    assert started.started_at == NOW and ahead.started_at is None
    assert_in_step(db, 0)

    with db.transaction() as store:
        reaped = store.ledger.reap_leases(NOW + timedelta(minutes=5))
    assert [f.attempt_id for f in reaped.lost] == [started.id] and reaped.requeued == [ahead.id]
    queue, _ = queue_and_queued(db)
    assert [row[0] for row in queue] == [ahead.id]
    assert_in_step(db, 1)


def test_a_lease_skips_a_queued_attempt_another_writer_holds_and_leases_the_next(db: Database) -> None:
    """A writer that holds a queued attempt's row (a cancel, a Kubernetes lease) takes its queue
    row only at its statement's end: a lease that locked that queue row first skips the attempt
    instead of waiting for it, so neither waits for the other."""
    wf = make_workflow(db, NOW)
    first = create_run(db, wf, NOW, NOW)
    second = create_run(db, wf, NOW + timedelta(days=1), NOW)
    with db.transaction() as holder:
        holder.conn.execute("SELECT 1 FROM attempts WHERE run_id = %s FOR UPDATE", (first.id,))
        with db.transaction() as store:
            leased = lease(store, "w1", NOW, 60, limit=1)
            assert leased == []   # the queue's head was the held attempt: nothing leased, nothing waited
            leased = lease(store, "w2", NOW, 60, limit=2)
            assert [a.run_id for a in leased] == [second.id]
    assert [row[2] for row in queue_and_queued(db)[0]] == [first.id]
    assert_in_step(db, 1)


def test_the_idle_poll_reads_the_queue_and_sees_only_due_attempts(db: Database) -> None:
    wf = make_workflow(db, NOW)
    with db.transaction() as store:
        assert not store.execution.queue_waiting(NOW)
        store.ledger.create_tick_runs([tick(wf, NOW + timedelta(minutes=1))], NOW + timedelta(minutes=1))
        assert not store.execution.queue_waiting(NOW)
        assert store.execution.queue_waiting(NOW + timedelta(minutes=1))
