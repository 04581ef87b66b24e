"""The poller's outcome queue: written by every statement that finishes an attempt with an
outcome to act on, emptied by the claim (each row once, disjoint across replicas), and by
retention and erasure with what they delete; platform-internal."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from tests.dbutil import TEST_URL
from tests.helpers import create_run, lease, make_workflow
from tests.integration.pipeline import DAILY, workflow
from tests.integration.test_retention import DAY, YEAR_START, run_tick
from tickwarden import erasure
from tickwarden.catalog import cancel
from tickwarden.db import Database
from tickwarden.models import AttemptOutcome
from tickwarden.retention import RetentionSweeper

QUEUE = "SELECT attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at FROM outcome_queue ORDER BY 1"


def queue(db: Database) -> list[tuple]:
    with db.connection() as conn:
        return conn.execute(QUEUE).fetchall()


def test_the_worker_outcome_and_the_reaped_lease_each_queue_one_row_and_cancels_queue_none(db, clock):
    wf = make_workflow(db, clock.now(), cron="* * * * *", cadence_seconds=60)
    base = clock.now()
    ok, failed, reaped, cancelled = (create_run(db, wf, base + timedelta(minutes=k), base) for k in range(4))
    with db.transaction() as store:
        attempts = {a.run_id: a for a in lease(store, "w1", base, 60, limit=10)}
        store.ledger.finish_attempt(attempts[ok.id], "w1", AttemptOutcome(status="succeeded"),
                                    base + timedelta(seconds=5))
        store.ledger.finish_attempt(attempts[failed.id], "w1",
                                    AttemptOutcome(status="failed", error_category="step_error", error="boom"),
                                    base + timedelta(seconds=6))
    cancel(db, cancelled.id, base + timedelta(seconds=7), "ops")
    with db.transaction() as store:
        lost = store.ledger.expire_leases(base + timedelta(minutes=5))
        again = store.ledger.finish_attempt(attempts[ok.id], "w1", AttemptOutcome(status="succeeded"),
                                            base + timedelta(seconds=8))  # a second delivery: no second row
    assert [a.attempt_id for a in lost] == [attempts[reaped.id].id] and not again.applied
    expected = [(attempts[run.id].id, wf.tenant_id, wf.id, run.id, run.scheduled_for, at)
                for run, at in ((ok, base + timedelta(seconds=5)), (failed, base + timedelta(seconds=6)),
                                (reaped, base + timedelta(minutes=5)))]
    assert queue(db) == sorted(expected)


def test_two_replicas_claiming_at_once_get_disjoint_batches_and_each_outcome_once(db, schema, clock):
    wf = make_workflow(db, clock.now(), cron="* * * * *", cadence_seconds=60)
    base = clock.now()
    runs = [create_run(db, wf, base + timedelta(minutes=k), base, budget=0) for k in range(6)]
    with db.transaction() as store:
        for a in lease(store, "w1", base, 600, limit=10):
            store.ledger.finish_attempt(a, "w1", AttemptOutcome(status="succeeded"), base + timedelta(seconds=a.id))
    now = base + timedelta(hours=1)
    one, two = (Database(TEST_URL, schema=schema, min_size=1, max_size=1) for _ in range(2))
    try:
        with one.transaction() as first:
            mine = first.monitoring.claim_finished_attempts(now, 4)
            with two.transaction() as second:  # while the first batch is still locked, uncommitted
                theirs = second.monitoring.claim_finished_attempts(now, 4)
        with one.transaction() as first:
            rest = first.monitoring.claim_finished_attempts(now, 4)
    finally:
        one.close()
        two.close()
    assert len(mine) == 4 and len(theirs) == 2 and rest == []
    assert {c.attempt_id for c in mine}.isdisjoint(c.attempt_id for c in theirs)
    assert {c.run_id for c in mine + theirs} == {r.id for r in runs}
    assert {c.run_status for c in mine + theirs} == {"succeeded"} and queue(db) == []


def test_erasing_a_tenant_takes_its_waiting_outcomes_and_leaves_the_others(db, clock):
    base = clock.now()
    acme = make_workflow(db, base, tenant="acme")
    globex = make_workflow(db, base, tenant="globex")
    for wf in (acme, globex):
        create_run(db, wf, base, base)
    with db.transaction() as store:
        for a in lease(store, "w1", base, 600, limit=10):
            store.ledger.finish_attempt(a, "w1", AttemptOutcome(status="succeeded"), base + timedelta(seconds=5))
    assert {row[1] for row in queue(db)} == {acme.tenant_id, globex.tenant_id}
    with db.transaction() as store:
        report = erasure.erase_tenant(store, "acme", actor="dpo", now=base)
    assert report.counts["outcome_queue"] == 1
    assert [row[1] for row in queue(db)] == [globex.tenant_id]


def test_retention_takes_the_waiting_outcomes_of_what_it_deletes(db):
    wf = workflow(db, YEAR_START, tenant="acme", name="nightly", cadence=DAILY)
    for index in range(70):  # no poller runs: every outcome still waits
        run_tick(db, wf, YEAR_START + index * DAY, True)
    assert len(queue(db)) == 70
    sweeper = RetentionSweeper(db)
    later = YEAR_START + 500 * DAY
    for _ in range(20):
        sweeper.run_once(later)
    with db.connection() as conn:
        left = conn.execute("SELECT a.id FROM attempts a JOIN runs r ON r.id = a.run_id"
                            " WHERE r.workflow_id = %s ORDER BY 1", (wf.id,)).fetchall()
    assert len(left) == 1, "everything but the newest success went"
    assert [(row[0],) for row in queue(db)] == left


def test_tenants_cannot_read_or_write_the_queue_and_the_platform_can(db, schema, clock):
    wf = make_workflow(db, clock.now())
    create_run(db, wf, clock.now(), clock.now())
    with db.transaction() as store:
        (a,) = lease(store, "w1", clock.now(), 600)
        store.ledger.finish_attempt(a, "w1", AttemptOutcome(status="succeeded"), clock.now())
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}", autocommit=True) as conn:
        conn.execute("SET ROLE tickwarden_app")
        conn.execute("SELECT set_config('tickwarden.tenant_id', %s, false)", (str(wf.tenant_id),))
        assert conn.execute("SELECT count(*) FROM outcome_queue").fetchone() == (0,)  # not even its own
        assert conn.execute("DELETE FROM outcome_queue").rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # a tenant writes none of it either
            conn.execute("INSERT INTO outcome_queue VALUES (0, %s, %s, 0, %s, %s)",
                         (wf.tenant_id, wf.id, clock.now(), clock.now()))
        conn.execute("SELECT set_config('tickwarden.platform', 'on', false)")
        assert conn.execute("SELECT count(*) FROM outcome_queue").fetchone() == (1,)
