import threading
from datetime import timedelta

from tests.dbutil import TEST_URL
from tests import helpers
from tests.helpers import create_run, lease, make_workflow
from tickwarden.db import Database
from tickwarden.models import AttemptOutcome
from tickwarden.poller import OutcomePoller
from tickwarden.reaper import INTERVAL_SECONDS, LeaseReaper
from tickwarden.store.ledger import FREE_LOST_REQUEUES


def lease_all(db, now, lease=30):
    with db.transaction() as store:
        return helpers.lease(store, "w1", now, lease, limit=1000)


def test_it_marks_an_expired_lease_lost_and_the_run_pending_retry(db, clock):
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now(), budget=1)
    lease_all(db, clock.now())
    reaper = LeaseReaper(db)
    assert reaper.run_once(clock.now() + timedelta(seconds=29)) == clock.now() + timedelta(seconds=29 + INTERVAL_SECONDS)
    assert reaper.last_reaped == []
    reaper.run_once(clock.now() + timedelta(seconds=31))
    with db.transaction() as store:
        [attempt] = store.ledger.list_attempts(run.id)
        run = store.ledger.get_run(run.id)
    assert attempt.status == "lost" and attempt.error_category == "lost"
    assert run.status == "pending_retry" and run.finished_at is None


def lose_attempt(db, now):
    """Lease the queued attempt and let its lease expire unrenewed, as a killed worker would."""
    lease_all(db, now)
    LeaseReaper(db).run_once(now + timedelta(minutes=1))


def test_a_lost_attempt_is_queued_again_without_spending_the_budget(db, clock):
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now(), budget=0)
    lose_attempt(db, clock.now())
    with db.transaction() as store:
        assert store.ledger.get_run(run.id).status == "pending_retry"
        store.ledger.queue_retries([(run.id, run.scheduled_for)], clock.now() + timedelta(minutes=1))
        [leased] = lease(store, "w2", clock.now() + timedelta(minutes=2), 30)
        failure = AttemptOutcome(status="failed", error_category="step_error", error="boom", retryable=True)
        finished = store.ledger.finish_attempt(leased, "w2", failure, clock.now() + timedelta(minutes=3))
    # The workflow's own failure is judged on its own budget (none), not on the platform's loss.
    assert leased.number == 2 and finished.run_status == "failed"


def test_a_retry_after_a_lost_attempt_still_has_the_whole_budget(db, clock):
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now(), budget=1)
    lose_attempt(db, clock.now())
    with db.transaction() as store:
        store.ledger.queue_retries([(run.id, run.scheduled_for)], clock.now() + timedelta(minutes=1))
        [leased] = lease(store, "w2", clock.now() + timedelta(minutes=2), 30)
        failure = AttemptOutcome(status="failed", error_category="step_error", error="boom", retryable=True)
        finished = store.ledger.finish_attempt(leased, "w2", failure, clock.now() + timedelta(minutes=3))
    assert finished.run_status == "pending_retry"


def test_a_workflow_that_kills_its_worker_every_time_fails_and_alerts_engineering(db, clock):
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now(), budget=0)
    now = clock.now()
    poller = OutcomePoller(db, "r1")
    for _ in range(FREE_LOST_REQUEUES + 1):
        lose_attempt(db, now)
        now += timedelta(minutes=2)
        poller.run_once(now)  # launches the re-queue, or evaluates the verdict
    with db.transaction() as store:
        run = store.ledger.get_run(run.id)
        attempts = store.ledger.list_attempts(run.id)
        [alert] = store.monitoring.list_alerts(open_only=True)
    assert [a.status for a in attempts] == ["lost"] * (FREE_LOST_REQUEUES + 1)
    assert run.status == "failed" and run.error_category == "lost"
    assert alert.alert.owner == "engineering"


def test_a_lost_attempt_past_the_runs_deadline_spends_the_budget(db, clock):
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now(), budget=0)
    lease_all(db, clock.now())
    LeaseReaper(db).run_once(clock.now() + timedelta(hours=4))  # the deadline is 3 hours after the tick
    with db.transaction() as store:
        run = store.ledger.get_run(run.id)
    assert run.status == "failed" and run.error_category == "lost"


def test_it_comes_back_at_once_while_batches_are_full(db, clock):
    wf = make_workflow(db, clock.now())
    for i in range(3):
        create_run(db, wf, clock.now() - timedelta(days=i), clock.now())
    lease_all(db, clock.now())
    later = clock.now() + timedelta(minutes=1)
    reaper = LeaseReaper(db, batch=2)
    assert reaper.run_once(later) == later and len(reaper.last_reaped) == 2
    assert reaper.run_once(later) > later and len(reaper.last_reaped) == 1



def race_reapers(schema: str, now, replicas: int = 3) -> tuple[list[int], list[int]]:
    """Reaper replicas passing at `now` at once, each until it finds no full batch: (lost, requeued) ids."""
    databases = [Database(TEST_URL, schema=schema, max_size=2) for _ in range(replicas)]
    lost: list[int] = []
    requeued: list[int] = []
    lock = threading.Lock()
    gate = threading.Barrier(replicas)

    def drive(reaper: LeaseReaper) -> None:
        gate.wait()
        while True:
            wake = reaper.run_once(now)
            with lock:
                lost.extend(a.attempt_id for a in reaper.last_reaped)
                requeued.extend(reaper.last_requeued)
            if wake > now:
                return

    threads = [threading.Thread(target=drive, args=(LeaseReaper(d, batch=7),)) for d in databases]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for d in databases:
        d.close()
    return lost, requeued

def test_replicas_reap_each_attempt_once(db, clock, schema):
    wf = make_workflow(db, clock.now())
    for i in range(60):
        create_run(db, wf, clock.now() - timedelta(hours=i), clock.now())
    lease_all(db, clock.now())
    seen, _ = race_reapers(schema, clock.now() + timedelta(minutes=1))
    assert len(seen) == len(set(seen)) == 60
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM attempts WHERE status = 'lost'").fetchone()[0] == 60


def test_replicas_reap_each_attempt_once_across_months_the_one_statement_leaves_to_the_bound_writes(
        db, clock, schema):
    """Leases whose ticks lie months back are locked by the pass's one statement and reaped by the
    lock and bound writes after it; with replicas racing, every attempt is still reaped once."""
    wf = make_workflow(db, clock.now())
    for i in range(40):
        create_run(db, wf, clock.now() - timedelta(days=9 * i), clock.now())  # ten months and more back
    lease_all(db, clock.now())
    seen, _ = race_reapers(schema, clock.now() + timedelta(minutes=1))
    assert len(seen) == len(set(seen)) == 40
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM attempts WHERE status = 'lost'").fetchone()[0] == 40
        assert conn.execute("SELECT count(*) FROM outcome_queue").fetchone()[0] == 40


def test_it_marks_instances_left_by_a_vanished_worker_dead(db, clock):
    with db.transaction() as store:
        t = store.catalog.upsert_tenant("acme", clock.now())
        env = store.catalog.apply_environment(t.id, "main", None, 60, clock.now()).row
        stale = store.execution.start_environment_instance(tenant_id=t.id, environment_id=env.id, worker_id="gone", pid=1,
                                                 status="warm", now=clock.now())
        fresh = store.execution.start_environment_instance(tenant_id=t.id, environment_id=env.id, worker_id="alive", pid=2,
                                                 status="warm", now=clock.now() + timedelta(minutes=10))
        orphan = store.execution.start_environment_instance(tenant_id=t.id, environment_id=env.id, worker_id="killed", pid=3,
                                                  status="busy", now=clock.now())
        working = store.execution.start_environment_instance(tenant_id=t.id, environment_id=env.id, worker_id="w1", pid=4,
                                                   status="busy", now=clock.now())
    wf = make_workflow(db, clock.now())
    create_run(db, wf, clock.now(), clock.now())
    lease_all(db, clock.now(), lease=3600)  # w1 is still running a long attempt
    LeaseReaper(db).run_once(clock.now() + timedelta(minutes=10))
    with db.transaction() as store:
        status = {i.id: i.status for i in store.execution.list_environment_instances(include_stopped=True)}
    assert status == {stale.id: "dead", fresh.id: "warm", orphan.id: "dead", working.id: "busy"}


def lease_batch(db, worker_id, now, count, lease=30):
    """Lease `count` attempts as a worker's exchange does: the first started, the others leased ahead."""
    with db.autocommit() as store:
        return [a for a, _ in store.execution.exchange(worker_id, now, lease, lease=count).leased]


def test_an_expired_lease_never_started_goes_back_to_the_queue_without_a_lost_attempt(db, clock):
    wf = make_workflow(db, clock.now())
    runs = [create_run(db, wf, clock.now() - timedelta(minutes=2 - i), clock.now(), budget=0) for i in range(2)]
    started, ahead = lease_batch(db, "w1", clock.now(), 2)
    assert started.started_at == clock.now() and ahead.started_at is None
    reaper = LeaseReaper(db)
    reaper.run_once(clock.now() + timedelta(seconds=31))
    assert [a.attempt_id for a in reaper.last_reaped] == [started.id] and reaper.last_requeued == [ahead.id]
    with db.transaction() as store:
        [lost] = store.ledger.list_attempts(runs[0].id)
        [requeued] = store.ledger.list_attempts(runs[1].id)
        run = store.ledger.get_run(runs[1].id)
        lost_requeues = store.conn.execute("SELECT lost_requeues FROM runs WHERE id = %s", (run.id,)).fetchone()[0]
    assert lost.status == "lost"  # it had started: its worker may have run steps
    # Leased ahead and never started: back in the queue as it was, nothing spent, no lost row.
    assert (requeued.id, requeued.status, requeued.worker_id, requeued.started_at, requeued.lease_expires_at,
            requeued.error_category) == (ahead.id, "queued", None, None, None, None)
    assert (run.status, run.attempts_count, lost_requeues, run.error_category, run.finished_at) == (
        "queued", 1, 0, None, None)
    # It is leased and run like any queued attempt, and its run still has its whole (empty) budget.
    with db.transaction() as store:
        [again] = lease(store, "w2", clock.now() + timedelta(seconds=32), 30)
        failure = AttemptOutcome(status="failed", error_category="step_error", error="boom", retryable=True)
        finished = store.ledger.finish_attempt(again, "w2", failure, clock.now() + timedelta(seconds=33))
    assert again.id == ahead.id and finished.run_status == "failed"


def test_replicas_give_each_lease_never_started_back_once(db, clock, schema):
    wf = make_workflow(db, clock.now())
    runs = [create_run(db, wf, clock.now() - timedelta(hours=i), clock.now(), budget=0) for i in range(60)]
    leased = lease_batch(db, "w1", clock.now(), 60)
    lost, requeued = race_reapers(schema, clock.now() + timedelta(minutes=1))
    assert lost == [leased[0].id]
    assert sorted(requeued) == sorted(a.id for a in leased[1:]) and len(set(requeued)) == 59
    with db.connection() as conn:
        statuses = dict(conn.execute("SELECT status, count(*) FROM attempts GROUP BY status").fetchall())
        runs_by_status = dict(conn.execute(
            "SELECT status, count(*) FROM runs WHERE lost_requeues = 0 AND error_category IS NULL "
            "GROUP BY status").fetchall())
    assert statuses == {"lost": 1, "queued": 59}
    assert runs_by_status == {"queued": 59} and len(runs) == 60


def test_a_pipelined_pass_abandons_the_instances_with_its_commit_after_reaping_their_workers_leases(db, clock, tmp_path):
    from tests.integration.test_notify_round_trips import Traced
    from tickwarden.db import DedicatedDatabase

    with db.transaction() as store:
        t = store.catalog.upsert_tenant("acme", clock.now())
        env = store.catalog.apply_environment(t.id, "main", None, 60, clock.now()).row
        busy = store.execution.start_environment_instance(tenant_id=t.id, environment_id=env.id, worker_id="w1", pid=1,
                                                          status="busy", now=clock.now())
    run = create_run(db, make_workflow(db, clock.now()), clock.now(), clock.now(), budget=1)
    lease_all(db, clock.now(), lease=3600)  # w1 vanished holding a lease of an hour
    tracer = Traced(tmp_path / "trace")
    dedicated = DedicatedDatabase(TEST_URL, schema=db.schema)
    try:
        tracer.configure(dedicated._conn)
        tracer.reset()
        LeaseReaper(dedicated).run_once(clock.now() + timedelta(hours=2))
        # the look; the lock of the expired lease with its reaping, one statement (the lock, then
        # the reaping, waited for apart before: 3). The abandon, sent unread after it, goes out
        # with the COMMIT, which nobody waits for (the next borrow, or the close, settles it).
        assert tracer.waits() == 2
    finally:
        dedicated.close()
    with db.transaction() as store:
        [attempt] = store.ledger.list_attempts(run.id)
        status = {i.id: i.status for i in store.execution.list_environment_instances(include_stopped=True)}
    # The abandon ran after the reaping: w1 held no running attempt any more, so its busy instance is dead.
    assert attempt.status == "lost" and status == {busy.id: "dead"}


def test_a_caller_that_knows_a_lease_ran_out_spares_the_pass_its_look_on_the_virtual_clock(db, clock, monkeypatch):
    """The simulator's reaper reaps without the look; a wall-clock reaper looks whatever it is told."""
    from tickwarden.store.execution import ExecutionRepository

    looks: list[object] = []
    original = ExecutionRepository.reaper_waiting

    def counted(self, now):
        looks.append(now)
        return original(self, now)

    monkeypatch.setattr(ExecutionRepository, "reaper_waiting", counted)
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now(), budget=1)
    lease_all(db, clock.now())
    told: list[object] = []
    reaper = LeaseReaper(db, expired=lambda cutoff: told.append(cutoff) or True)
    later = clock.now() + timedelta(seconds=31)
    assert reaper.run_once(later) == later + timedelta(seconds=INTERVAL_SECONDS)
    assert told == [later] and looks == []  # asked the caller, not the ledger
    assert [item.run_id for item in reaper.last_reaped] == [run.id]
    # Told wrongly (nothing runs any more): the reap finds nothing and writes nothing.
    assert reaper.run_once(later + timedelta(minutes=1)) == later + timedelta(minutes=1, seconds=INTERVAL_SECONDS)
    assert reaper.last_reaped == [] and looks == []
    with db.transaction() as store:
        assert [a.status for a in store.ledger.list_attempts(run.id)] == ["lost"]
    # On the wall clock the look is also the reaper's evidence of reaching the server: it always looks.
    walled = LeaseReaper(db, expired=lambda cutoff: True, monotonic=lambda: 0.0)
    walled.run_once(later + timedelta(minutes=2))
    assert len(looks) == 1


def test_a_pass_with_a_lease_to_reap_waits_for_the_server_three_times_on_a_pooled_connection(db, clock, tmp_path):
    """The look; BEGIN with the reaping (the lock and the writes, one statement); the abandon with
    the COMMIT. Six before: the look, BEGIN, the lock, the writes, the abandon and the COMMIT each alone."""
    from tests.integration.test_poller_pipeline import round_trips, traced_pool

    run = create_run(db, make_workflow(db, clock.now()), clock.now(), clock.now(), budget=1)
    lease_all(db, clock.now())
    path = tmp_path / "trace"
    with traced_pool(db, path) as traced:
        reaper = LeaseReaper(traced)
        reaper.run_once(clock.now() + timedelta(minutes=1))
    assert [a.run_id for a in reaper.last_reaped] == [run.id]
    # the look's Sync; the reaping's Flush; the commit's Sync and the Flush that reads its results (one wait)
    assert round_trips(path) == ["Sync", "Flush", "Sync", "Flush"], round_trips(path)
    with db.transaction() as store:
        [attempt] = store.ledger.list_attempts(run.id)
    assert attempt.status == "lost"
