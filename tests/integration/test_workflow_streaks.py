"""The consecutive-failure streak kept beside the ledger (workflow_streaks): what the walk of the ledger would count."""

import threading
from datetime import timedelta

import psycopg

from tests.dbutil import TEST_URL
from tests.helpers import make_workflow
from tickwarden.store.queries import queries

WALK = """
    SELECT count(*), min(r.finished_at),
           (array_agg(r.id ORDER BY r.scheduled_for DESC, r.id DESC))[1]
      FROM runs r LEFT JOIN workflow_successes ok ON ok.workflow_id = r.workflow_id
     WHERE r.workflow_id = %s AND r.status IN ('failed', 'missed')
       AND r.scheduled_for > coalesce(ok.scheduled_for, '-infinity'::timestamptz)"""


def add_run(conn, wf, at, status, finished=None):
    """Insert one finished run of `wf` ticked at `at` (as any writer of the ledger may) and return its id."""
    return conn.execute(
        "INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count, deadline_at,"
        " created_at, finished_at, error_category, error) VALUES (%s, %s, %s, %s, 0, 1, %s, %s, %s,"
        " CASE WHEN %s <> 'succeeded' THEN 'step_error' END, CASE WHEN %s <> 'succeeded' THEN 'boom' END)"
        " RETURNING id",
        (wf.tenant_id, wf.id, at, status, at, at, finished or at + timedelta(minutes=1), status, status)).fetchone()[0]


def kept(db, wf):
    """The streak as the evaluation reads it, checked against a walk of the ledger."""
    with db.transaction() as store:
        walked = store.conn.execute(WALK, (wf.id,)).fetchone()
        (inp,) = store.monitoring.evaluation_inputs([wf.id])
        row = store.conn.execute("SELECT failures, since FROM workflow_streaks WHERE workflow_id = %s",
                                 (wf.id,)).fetchone()
        since = store.conn.execute("SELECT scheduled_for FROM workflow_successes WHERE workflow_id = %s",
                                   (wf.id,)).fetchone()
    assert (inp.failures, inp.first_failure_at, inp.last_failure_run_id) == walked
    return inp.failures, row, since[0] if since else None


def test_failures_count_up_and_a_success_at_the_head_ends_the_streak(db, clock):
    wf = make_workflow(db, clock.now())
    t0 = clock.now()
    with db.transaction() as store:
        for k, status in enumerate(["failed", "succeeded", "failed", "missed", "failed"]):
            add_run(store.conn, wf, t0 + timedelta(hours=k), status)
    failures, row, since = kept(db, wf)
    assert failures == 3 and row == (3, since) and since == t0 + timedelta(hours=1)
    with db.transaction() as store:
        add_run(store.conn, wf, t0 + timedelta(hours=5), "succeeded")
    assert kept(db, wf)[:2] == (0, (0, t0 + timedelta(hours=5)))


def test_out_of_order_confirmations_count_as_the_walk_does(db, clock):
    wf = make_workflow(db, clock.now())
    t0 = clock.now()
    with db.transaction() as store:
        add_run(store.conn, wf, t0 + timedelta(hours=2), "succeeded")
        for k in (4, 6, 8):
            add_run(store.conn, wf, t0 + timedelta(hours=k), "failed")
    with db.transaction() as store:  # a failure of a tick before the newest success: in no streak
        add_run(store.conn, wf, t0 + timedelta(hours=1), "failed", finished=t0 + timedelta(hours=9))
    assert kept(db, wf)[0] == 3
    with db.transaction() as store:  # a failure inside the streak, confirmed last: the earliest finish moves
        add_run(store.conn, wf, t0 + timedelta(hours=5), "failed", finished=t0 + timedelta(minutes=30))
    assert kept(db, wf)[0] == 4
    with db.transaction() as store:  # a success inside the streak: only the failures after it remain
        add_run(store.conn, wf, t0 + timedelta(hours=5, minutes=30), "succeeded")
    failures, row, since = kept(db, wf)
    assert failures == 2 and row == (2, since) and since == t0 + timedelta(hours=5, minutes=30)


def test_a_failure_that_changes_or_leaves_is_counted_again(db, clock):
    wf = make_workflow(db, clock.now())
    t0 = clock.now()
    with db.transaction() as store:
        add_run(store.conn, wf, t0, "succeeded")
        missed = add_run(store.conn, wf, t0 + timedelta(hours=1), "missed")
        failed = add_run(store.conn, wf, t0 + timedelta(hours=2), "failed")
    with db.transaction() as store:  # the missed run's late attempt fails: a later finish, the same streak
        store.conn.execute("UPDATE runs SET status = 'failed', finished_at = %s WHERE id = %s",
                           (t0 + timedelta(hours=3), missed))
    assert kept(db, wf)[0] == 2
    with db.transaction() as store:  # the newest failure run again by hand: no verdict any more
        store.conn.execute("UPDATE runs SET status = 'queued', finished_at = NULL WHERE id = %s", (failed,))
    assert kept(db, wf)[0] == 1
    with db.transaction() as store:  # the missed run recovers: a success at the head
        store.conn.execute("UPDATE runs SET status = 'succeeded', finished_at = %s WHERE id = %s",
                           (t0 + timedelta(hours=4), missed))
    assert kept(db, wf)[0] == 0


def test_deleting_runs_keeps_the_streak_exact_and_erasure_takes_the_row(db, clock):
    wf = make_workflow(db, clock.now())
    t0 = clock.now()
    with db.transaction() as store:
        old = add_run(store.conn, wf, t0, "failed")
        add_run(store.conn, wf, t0 + timedelta(hours=1), "succeeded")
        first = add_run(store.conn, wf, t0 + timedelta(hours=2), "failed")
        add_run(store.conn, wf, t0 + timedelta(hours=3), "failed")
    with db.transaction() as store:  # retention's kind of delete (before the newest success), then any other
        store.conn.execute("DELETE FROM runs WHERE id = %s", (old,))
    assert kept(db, wf)[0] == 2
    with db.transaction() as store:
        store.conn.execute("DELETE FROM runs WHERE id = %s", (first,))
    assert kept(db, wf)[0] == 1
    with db.transaction() as store:
        store.conn.execute("DELETE FROM workflows WHERE id = %s", (wf.id,))
        assert store.conn.execute("SELECT count(*) FROM workflow_streaks").fetchone()[0] == 0


def test_the_evaluation_reads_the_kept_row_and_never_walks_the_streak(db, clock):
    wf = make_workflow(db, clock.now())
    t0 = clock.now()
    with db.transaction() as store:
        add_run(store.conn, wf, t0, "succeeded")
        for k in range(1, 31):
            add_run(store.conn, wf, t0 + timedelta(hours=k), "failed")
        plan = [row[0] for row in store.conn.execute(
            "EXPLAIN (ANALYZE, COSTS OFF) " + queries()["monitoring_evaluation_inputs"], {"workflow_ids": [wf.id]})]
    assert not any("workflow_id_scheduled_for_id_idx" in line for line in plan), plan  # no walk of the streak
    probes = [line for line in plan if "Index Scan using runs_" in line]
    assert len(probes) == 1 and "_pkey" in probes[0] and "rows=1 " in probes[0], plan  # the newest failure
    assert kept(db, wf)[0] == 30


def test_concurrent_outcomes_of_one_workflow_are_counted_one_after_the_other(db, schema, clock):
    wf = make_workflow(db, clock.now())
    t0 = clock.now()
    with db.transaction() as store:
        add_run(store.conn, wf, t0, "succeeded")
        add_run(store.conn, wf, t0 + timedelta(hours=1), "failed")
    options = f"-c search_path={schema} -c tickwarden.platform=on"
    with psycopg.connect(TEST_URL, options=options) as first, psycopg.connect(TEST_URL, options=options) as second:
        add_run(first, wf, t0 + timedelta(hours=2), "failed")  # holds the row's lock until it commits
        done = threading.Event()

        def other() -> None:
            add_run(second, wf, t0 + timedelta(hours=3), "missed")
            second.commit()
            done.set()

        thread = threading.Thread(target=other)
        thread.start()
        assert not done.wait(0.5)  # waits for the first outcome's commit
        first.commit()
        thread.join(10)
    assert done.is_set()
    assert kept(db, wf)[0] == 3


def test_a_row_left_behind_by_a_concurrent_success_is_walked_then_counted_again(db, schema, clock):
    wf = make_workflow(db, clock.now())
    t0 = clock.now()
    with db.transaction() as store:
        add_run(store.conn, wf, t0, "succeeded")
    options = f"-c search_path={schema} -c tickwarden.platform=on"
    with psycopg.connect(TEST_URL, options=options) as first, psycopg.connect(TEST_URL, options=options) as second:
        add_run(first, wf, t0 + timedelta(hours=1), "failed")  # the workflow's first row, not committed yet
        add_run(second, wf, t0 + timedelta(hours=2), "succeeded")  # cannot see it, so does not wait
        second.commit()
        first.commit()
    failures, row, since = kept(db, wf)  # the row names the older success: the evaluation walks
    assert failures == 0 and row == (1, t0) and since == t0 + timedelta(hours=2)
    with db.transaction() as store:
        add_run(store.conn, wf, t0 + timedelta(hours=3), "failed")
    assert kept(db, wf)[:2] == (1, (1, t0 + timedelta(hours=2)))
