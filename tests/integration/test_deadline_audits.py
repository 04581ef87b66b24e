"""A deadline pass reads its due watermarks in the statement that arms: the same watermarks, in the same order.

The reference is the arming followed by `monitoring_due_tick_audits` as a statement of its
own (what a pass sent before), each run in a transaction rolled back, on one fleet: some
watermarks due, some schedules listed for arming (new ones, edited ones due or not, a
paused one), and batch sizes below, at and above what is due.
"""

from datetime import timedelta

from tests.integration.test_deadline_plans import AT, _fleet
from tickwarden.db import Database
from tickwarden.store.monitoring import MonitoringRepository


def _fleet_with_arms(conn) -> None:
    _fleet(conn)  # 1,000 schedules, watermark i due at AT + (i % 5) minutes, none listed
    conn.execute("DELETE FROM tick_audits WHERE schedule_id IN (3, 4, 500, 998)")
    conn.execute("INSERT INTO tick_audit_arms (schedule_id) VALUES (3), (4), (500), (998), (4)")  # never armed
    # edited: listed by the trigger, re-armed (due before or not yet), one of them twice
    conn.execute("UPDATE schedules SET version = version + 1, updated_at = %s WHERE id IN (1, 2, 10, 11, 12, 999)",
                 (AT + timedelta(minutes=2),))
    conn.execute("UPDATE schedules SET version = version + 1 WHERE id = 10")
    conn.execute("UPDATE schedules SET status = 'paused' WHERE id = 500")  # listed, not armed
    conn.execute("INSERT INTO tick_audit_arms (schedule_id) VALUES (7)")  # listed, its watermark current


def _both(conn, now, limit):
    store = MonitoringRepository(conn)
    lookback = now - timedelta(days=1)
    try:
        closed, merged = store.close_overdue_and_take_audits(now, 500, "late", lookback, limit)
    finally:
        conn.rollback()
    try:
        store.close_overdue_and_arm(now, 500, "late", lookback)
        separate = store.due_tick_audits(now, limit) if limit else []
        watermarks = conn.execute("SELECT count(*) FROM tick_audits").fetchone()[0]
    finally:
        conn.rollback()
    assert closed == []
    return merged, separate, watermarks


def test_the_watermarks_a_pass_takes_are_those_the_arming_then_a_read_of_the_due_ones_would_take(db: Database) -> None:
    with db.connection() as conn:
        _fleet_with_arms(conn)
        conn.commit()
        for now, limit in [(AT + timedelta(minutes=1), 500), (AT + timedelta(minutes=1), 3),
                           (AT + timedelta(minutes=3), 2000), (AT + timedelta(minutes=3), 600),
                           (AT + timedelta(minutes=3), 1), (AT, 10), (AT + timedelta(hours=1), 0),
                           (AT + timedelta(hours=1), 999)]:
            merged, separate, watermarks = _both(conn, now, limit)
            assert watermarks == 999  # the four new ones armed, the paused one's left
            assert merged == separate, (now, limit)
            assert len(merged) == min(limit, len(separate)) and (limit == 0 or merged), (now, limit)


def test_a_pass_arms_and_takes_its_watermarks_in_one_statement(db: Database, clock, tmp_path) -> None:
    from tests.dbutil import TEST_URL
    from tests.integration.pipeline import FIVE_MIN, workflow
    from tests.integration.test_notify_round_trips import Traced
    from tickwarden.deadlines import DeadlineDetector

    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    tracer = Traced(tmp_path / "trace")
    with Database(TEST_URL, schema=db.schema, max_size=1, configure=tracer.configure) as traced:
        detector = DeadlineDetector(traced)
        tracer.reset()
        detector.run_once(clock.now())  # arms the watermark, due at once, and walks it
        assert detector.last.audited_schedules == 1 and detector.last.missed_ticks == []
        # BEGIN; the setting that runs the kept plans (see deadlines); the closing, the arming and
        # the due watermarks; the watermark's advance; COMMIT. Pipelined: BEGIN and the setting go
        # with the closing, the advance with the COMMIT (three waits; one at each statement, four).
        assert tracer.statements() == 5 and tracer.waits() == 3
    with db.connection() as conn:
        [(checked,)] = conn.execute("SELECT ta.checked_until FROM tick_audits ta JOIN schedules s"
                                    " ON s.id = ta.schedule_id WHERE s.workflow_id = %s", (wf.id,)).fetchall()
    assert checked is not None
