"""The queue of queued attempts (migrations 0031, 0036): a row exactly while its attempt is queued, whatever moves it,
and the one place queued attempts are read from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from tests.dbutil import TEST_URL, drop_schema, make_schema, upgrade_before
from tests.helpers import create_run, lease, make_workflow, tick
from tickwarden import catalog, migrate
from tickwarden.db import Database
from tickwarden.erasure import delete_tenant
from tickwarden.models import AttemptOutcome
from tickwarden.store import Store

NOW = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)


def queue_and_queued(db: Database) -> tuple[list[tuple], list[tuple]]:
    """The queue's rows and the queued attempts, each as (attempt id, tick, run, workflow, tenant, queued_at, number)."""
    with db.transaction() as store:
        queue = store.conn.execute(
            "SELECT attempt_id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at, number"
            " FROM attempt_queue ORDER BY attempt_id").fetchall()
        queued = store.conn.execute(
            "SELECT id, run_scheduled_for, run_id, workflow_id, tenant_id, queued_at, number"
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

    with db.transaction() as store:
        store.conn.execute("UPDATE attempts SET number = 3 WHERE id = %s", (retries[0].id,))
    assert_in_step(db, 3)   # no statement renumbers an attempt; were one to, its queue row would follow

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


def ledger_relations(plan: list[dict]) -> set[str]:
    """The ledger's tables (parents or partitions) a JSON plan reads or writes."""
    seen: set[str] = set()

    def walk(node: dict) -> None:
        if node.get("Relation Name", "").startswith(("runs", "attempts", "attempt_steps")):
            seen.add(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return seen


def test_the_retry_launcher_and_the_selftest_read_the_queued_retries_from_the_queue(db: Database) -> None:
    """The retry launcher's look (`kubernetes_queued_retries`) reads the queue alone, through its
    index of retries: due retries oldest first, never a first attempt queued ahead of them nor a
    retry of an environment that runs as a pod; the self-test's look is its tenant's retries."""
    from tickwarden.store.queries import queries

    wf = make_workflow(db, NOW)
    podded = make_workflow(db, NOW, name="podded")
    with db.transaction() as store:
        store.conn.execute(
            "INSERT INTO environments (tenant_id, name, runtime, pod, created_at, updated_at)"
            " VALUES (%s, 'etl', 'kubernetes', '{}', %s, %s)", (wf.tenant_id, NOW, NOW))
        store.conn.execute("UPDATE workflows SET environment_id = (SELECT id FROM environments WHERE name = 'etl')"
                           " WHERE id = %s", (podded.id,))
    later = create_run(db, wf, NOW, NOW)
    sooner = create_run(db, wf, NOW + timedelta(days=1), NOW)
    pod = create_run(db, podded, NOW, NOW)
    with db.transaction() as store:
        leased = lease(store, "w1", NOW, 60, limit=3)
        assert sorted(a.run_id for a in leased) == sorted([later.id, sooner.id, pod.id])
        for attempt in leased:
            store.ledger.finish_attempt(attempt, "w1", AttemptOutcome(
                status="failed", error_category="connection", error="refused", retryable=True), NOW)
        retries = {run.id: store.ledger.queue_retries([(run.id, run.scheduled_for)], NOW + timedelta(minutes=m))[0]
                   for run, m in ((sooner, 1), (pod, 1), (later, 2))}
    first = create_run(db, wf, NOW + timedelta(days=2), NOW)   # a first attempt, queued ahead of every retry
    assert_in_step(db, 4)

    with db.transaction() as store:
        due = store.kubernetes.queued_retries(NOW + timedelta(seconds=90), 10)
        assert [(r.attempt_id, r.run_id, r.number) for r in due] == [(retries[sooner.id].id, sooner.id, 2)]
        due = store.kubernetes.queued_retries(NOW + timedelta(minutes=3), 10)
        assert [r.run_id for r in due] == [sooner.id, later.id]
        assert [r.run_id for r in store.kubernetes.queued_retries(NOW + timedelta(minutes=3), 1)] == [sooner.id]
        assert {(r.tenant, r.workflow) for r in due} == {("acme", "nightly")}
        listed = store.selftest.queued_attempts(wf.tenant_id)
        assert [a.id for a in listed] == sorted(a.id for a in retries.values())
        assert first.id not in {a.run_id for a in listed} and {a.status for a in listed} == {"queued"}
        assert store.selftest.queued_attempts(wf.tenant_id + 1000) == []
        plan = store.conn.execute("EXPLAIN (FORMAT JSON) " + queries()["kubernetes_queued_retries"],
                                  {"now": NOW + timedelta(minutes=3), "limit": 10}).fetchone()[0]
        assert ledger_relations(plan) == set()


def test_migrating_a_queue_gives_its_rows_their_numbers_and_retires_the_attempts_queued_index() -> None:
    """0036 copies each queued attempt's number into its queue row and drops attempts_queued_idx,
    every month partition's copy with it; the triggers copy the number from then on."""
    name = make_schema("mig")
    everything = migrate.available_migrations()

    def queued_indexes(conn: psycopg.Connection) -> list[str]:
        return [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_class t ON t.oid = i.indrelid"
            " WHERE t.relnamespace = current_schema()::regnamespace AND t.relname LIKE 'attempts%%'"
            " AND pg_get_expr(i.indpred, i.indrelid) LIKE '%%queued%%'").fetchall()]

    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            upgrade_before(conn, 36, NOW)
            conn.execute("SELECT tickwarden_ledger_partition(%s)", (NOW,))
            assert len(queued_indexes(conn)) == 3   # the parent's, the month's, the DEFAULT partition's
            conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'Acme', %s)", (NOW,))
            conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                         " SELECT id, w, %s, %s FROM tenants, unnest(ARRAY['a', 'b']) w", (NOW, NOW))
            conn.execute("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,"
                         " attempts_count, deadline_at, created_at)"
                         " SELECT tenant_id, id, %s, false, 'queued', 2, CASE name WHEN 'a' THEN 1 ELSE 2 END, %s, %s"
                         " FROM workflows", (NOW, NOW + timedelta(hours=1), NOW))
            conn.execute("INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status,"
                         " queued_at, finished_at)"
                         " SELECT r.tenant_id, r.workflow_id, r.id, r.scheduled_for, n,"
                         " CASE WHEN n = r.attempts_count THEN 'queued' ELSE 'failed' END, %s,"
                         " CASE WHEN n = r.attempts_count THEN NULL ELSE %s::timestamptz END"
                         " FROM runs r, generate_series(1, r.attempts_count) n", (NOW, NOW))
            conn.commit()
            assert [m.version for m in migrate.upgrade(conn, NOW)] == [m.version for m in everything if m.version >= 36]
            assert conn.execute("SELECT w.name, q.number FROM attempt_queue q JOIN workflows w ON w.id = q.workflow_id"
                                " ORDER BY 1").fetchall() == [("a", 1), ("b", 2)]
            assert queued_indexes(conn) == []
            conn.execute("SELECT tickwarden_ledger_partition(%s)", (NOW + timedelta(days=40),))
            assert queued_indexes(conn) == []   # nor does a month created later get one
            conn.execute("UPDATE attempts SET status = 'cancelled', finished_at = %s WHERE status = 'queued'",
                         (NOW,))
            assert conn.execute("SELECT count(*) FROM attempt_queue").fetchone() == (0,)
            conn.execute("UPDATE attempts SET status = 'queued', finished_at = NULL WHERE status = 'cancelled'")
            assert conn.execute("SELECT q.number, a.number FROM attempt_queue q JOIN attempts a ON a.id = q.attempt_id"
                                " ORDER BY 1").fetchall() == [(1, 1), (2, 2)]
            conn.rollback()
    finally:
        drop_schema(name)


def test_each_lease_takes_its_attempts_out_of_the_queue_itself(db: Database) -> None:
    """The move from queued to running is the leases' (migration 0039): the worker's and both
    Kubernetes leases delete their attempts' queue rows, and the row trigger leaves that move alone."""
    wf = make_workflow(db, NOW)
    runs = [create_run(db, wf, NOW + timedelta(days=d), NOW) for d in range(4)]
    assert_in_step(db, 4)

    with db.transaction() as store:
        assert [a.run_id for a in lease(store, "w1", NOW, 60, limit=1)] == [runs[0].id]
    assert_in_step(db, 3)

    with db.transaction() as store:
        pod = store.kubernetes.lease_tick_attempt(wf.id, runs[1].scheduled_for, "pod-1", NOW, 60)
        assert pod is not None and pod.run_id == runs[1].id
    assert_in_step(db, 2)

    with db.transaction() as store:
        queued = store.conn.execute("SELECT attempt_id FROM attempt_queue WHERE run_id = %s",
                                    (runs[2].id,)).fetchone()[0]
        job = store.kubernetes.lease_attempt(queued, "job-1", NOW, 60)
        assert job is not None and job.id == queued
    assert_in_step(db, 1)

    with db.transaction() as store:
        store.conn.execute("UPDATE attempts SET status = 'running', lease_expires_at = %s WHERE run_id = %s",
                           (NOW, runs[3].id))
        # only a lease makes that move: any other statement that did would leave the row behind
        assert store.conn.execute("SELECT run_id FROM attempt_queue").fetchall() == [(runs[3].id,)]


def test_migrating_leaves_the_queue_exact_and_hands_the_lease_its_move() -> None:
    """0039 narrows the row trigger on a database with queued and running attempts: no queue row
    moves, and from then on a lease takes its attempts out of the queue and a release puts them back."""
    name = make_schema("mig")
    everything = migrate.available_migrations()
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            upgrade_before(conn, 39, NOW)
            conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'Acme', %s)", (NOW,))
            conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                         " SELECT id, w, %s, %s FROM tenants, unnest(ARRAY['a', 'b', 'c']) w", (NOW, NOW))
            conn.execute("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,"
                         " attempts_count, deadline_at, created_at)"
                         " SELECT tenant_id, id, %s, false, 'queued', 2, 1, %s, %s FROM workflows",
                         (NOW, NOW + timedelta(hours=1), NOW))
            conn.execute("INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status,"
                         " queued_at) SELECT tenant_id, workflow_id, id, scheduled_for, 1, 'queued', %s FROM runs",
                         (NOW,))
            conn.execute("UPDATE attempts SET status = 'running', worker_id = 'w0', lease_expires_at = %s"
                         " WHERE workflow_id = (SELECT id FROM workflows WHERE name = 'a')", (NOW,))
            conn.commit()

            def queue() -> list[str]:
                return [r[0] for r in conn.execute("SELECT w.name FROM attempt_queue q"
                                                   " JOIN workflows w ON w.id = q.workflow_id ORDER BY 1")]

            assert queue() == ["b", "c"]
            assert [m.version for m in migrate.upgrade(conn, NOW)] == [m.version for m in everything if m.version >= 39]
            assert queue() == ["b", "c"]
            store = Store(conn)
            leased = lease(store, "w1", NOW, 60, limit=1)
            assert len(leased) == 1 and queue() == ["c"]
            assert store.execution.release_attempts(leased, "w1") == [leased[0].id]
            assert queue() == ["b", "c"]
            conn.rollback()
    finally:
        drop_schema(name)
