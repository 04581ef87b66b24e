"""The deadline detector: overdue runs and ticks that never ran become `missed`, then alert once."""

import threading
from datetime import timedelta

from tests.dbutil import TEST_URL
from tests.helpers import lease
from tests.integration.pipeline import DAILY, FIVE_MIN, HOURLY, OK, alerts_of, create_tick, events_of, fail, tick, workflow
from tickwarden import catalog
from tickwarden.db import Database
from tickwarden.deadlines import DeadlineDetector
from tickwarden.poller import OutcomePoller


def runs_of(db, wf):
    with db.transaction() as store:
        return list(reversed(store.ledger.list_runs(wf.id, limit=1000)))


def test_a_run_stuck_queued_past_its_deadline_becomes_missed_and_alerts_once(db, clock):
    wf = workflow(db, clock.now(), cadence=DAILY)
    run = create_tick(db, wf, clock.set(clock.now().replace(hour=2, minute=0)) or clock.now(), clock.now())
    detector = DeadlineDetector(db)
    detector.run_once(run.deadline_at - timedelta(seconds=1))
    assert detector.last.overdue_runs == []
    clock.set(run.deadline_at)
    for _ in range(5):
        detector.run_once(clock.now())
        clock.advance(60)
    (missed,) = runs_of(db, wf)
    assert (missed.status, missed.error_category) == ("missed", "missed")
    with db.transaction() as store:
        assert [a.status for a in store.ledger.list_attempts(run.id)] == ["cancelled"]
    (alert,) = alerts_of(db, wf)
    assert (alert.severity, alert.owner, alert.failure_count) == ("critical", "engineering", 1)
    assert [e.kind for e in events_of(db, alert.id)] == ["opened"]
    # the poller finds nothing to redo: the cancelled attempt was processed when it was cancelled
    poller = OutcomePoller(db, "p1")
    poller.run_once(clock.now())
    assert poller.last.claimed == 0


def test_a_run_whose_lease_expired_is_left_to_the_reaper(db, clock):
    wf = workflow(db, clock.now(), cadence=DAILY)
    run = create_tick(db, wf, clock.now(), clock.now())
    with db.transaction() as store:
        lease(store, "w1", clock.now(), 60)
    detector = DeadlineDetector(db)
    detector.run_once(run.deadline_at + timedelta(seconds=1))
    assert detector.last.overdue_runs == []
    with db.transaction() as store:
        store.ledger.expire_leases(run.deadline_at + timedelta(seconds=2))
        assert store.ledger.get_run(run.id).status == "pending_retry"


def test_a_run_past_its_deadline_with_a_live_lease_is_missed_and_its_late_result_changes_nothing(db, clock):
    wf = workflow(db, clock.now(), cadence=DAILY)
    run = create_tick(db, wf, clock.now(), clock.now())
    with db.transaction() as store:
        (attempt,) = lease(store, "w1", clock.now(), 10**6)
    DeadlineDetector(db).run_once(run.deadline_at)
    with db.transaction() as store:
        store.ledger.finish_attempt(attempt, "w1", OK, run.deadline_at + timedelta(seconds=5))
        assert store.ledger.get_run(run.id).status == "missed"
    OutcomePoller(db, "p1").run_once(run.deadline_at + timedelta(seconds=10))
    (alert,) = alerts_of(db, wf)
    assert alert.status == "open"


def test_a_tick_with_no_run_during_a_trigger_outage_becomes_a_missed_run(db, clock):
    wf = workflow(db, clock.now(), cadence=DAILY)  # published 01:55, fires at 02:00, starting deadline 300 s
    detector = DeadlineDetector(db)
    detector.run_once(clock.now())
    tick_time = clock.now().replace(hour=2, minute=0)
    detector.run_once(tick_time + timedelta(seconds=299))
    assert runs_of(db, wf) == []
    for step in range(5):
        detector.run_once(tick_time + timedelta(seconds=301 + 60 * step))
    (missed,) = runs_of(db, wf)
    assert (missed.scheduled_for, missed.status, missed.attempts_count, missed.error) == (
        tick_time, "missed", 0, "the tick never ran")
    (alert,) = alerts_of(db, wf)
    assert alert.owner == "engineering" and alert.last_error_category == "missed"
    assert [e.kind for e in events_of(db, alert.id)] == ["opened"]


def test_a_short_outage_between_fired_ticks_is_found(db, clock):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    poller, detector = OutcomePoller(db, "p1"), DeadlineDetector(db)
    base = clock.now().replace(minute=0) + timedelta(hours=1)
    detector.run_once(clock.now())
    for i in range(12):  # 02:00 … 02:55, the 02:20 and 02:25 ticks never fire
        scheduled = base + timedelta(minutes=5 * i)
        if i not in (4, 5):
            tick(db, poller, wf, scheduled, [OK], clock)
        detector.run_once(clock.now())
    detector.run_once(clock.advance(120))  # before the 03:00 tick's grace has passed
    runs = runs_of(db, wf)
    assert [r.status for r in runs].count("missed") == 2
    assert {r.scheduled_for for r in runs if r.status == "missed"} == {base + timedelta(minutes=20), base + timedelta(minutes=25)}
    assert len(runs) == 12
    assert alerts_of(db, wf) == []  # two misses and then successes: below the threshold of three


def test_ticks_before_publication_outside_the_lookback_or_while_paused_are_not_missed(db, clock):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    detector = DeadlineDetector(db, lookback=timedelta(hours=1))
    detector.run_once(clock.now())
    catalog.pause(db, "acme", "check", clock.now())
    detector.run_once(clock.advance(3600))
    assert runs_of(db, wf) == []
    catalog.resume(db, "acme", "check", clock.now())
    resumed = clock.now()
    detector.run_once(clock.advance(5 * 3600))  # the detector itself was down for five hours
    runs = runs_of(db, wf)
    assert runs and all(r.scheduled_for > resumed for r in runs)
    assert all(r.scheduled_for > clock.now() - timedelta(hours=1) for r in runs)
    assert len(runs) == 12 - 1  # ticks in the last hour whose grace (300 s) has passed
    (alert,) = alerts_of(db, wf)
    assert alert.failure_count == len(runs)


def test_a_failed_run_and_a_missed_tick_count_in_one_streak(db, clock):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    poller, detector = OutcomePoller(db, "p1"), DeadlineDetector(db)
    detector.run_once(clock.now())
    base = clock.now().replace(minute=0) + timedelta(hours=1)
    tick(db, poller, wf, base, [fail()], clock)
    tick(db, poller, wf, base + timedelta(minutes=5), [fail()], clock)
    detector.run_once(base + timedelta(minutes=10, seconds=301))  # the 03:10 tick never ran
    (alert,) = alerts_of(db, wf)
    assert alert.failure_count == 3 and alert.last_error_category == "missed"


def test_a_pass_that_records_a_missed_tick_and_opens_an_alert_is_one_transaction(db, clock, counted):
    wf = workflow(db, clock.now(), cadence=DAILY)
    detector = DeadlineDetector(db)
    detector.run_once(clock.now())
    counted.clear()
    detector.run_once(clock.now().replace(hour=2, minute=6))  # the 02:00 tick never ran
    assert len(detector.last.missed_ticks) == 1 and detector.last.evaluation.opened
    assert counted == [1]
    (alert,) = alerts_of(db, wf)
    assert alert.status == "open"


def test_ticks_that_already_ran_are_not_sent_to_be_recorded_missed(db, clock, monkeypatch):
    """The audit reads which walked ticks have their run; only the others go to the insert."""
    from tickwarden.store.monitoring import MonitoringRepository

    sent: list[tuple[list, list]] = []
    real = MonitoringRepository.record_missed_and_advance

    def spy(self, ticks, advances, error, now):  # type: ignore[no-untyped-def]
        sent.append((list(ticks), list(advances)))
        return real(self, ticks, advances, error, now)

    monkeypatch.setattr(MonitoringRepository, "record_missed_and_advance", spy)
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    poller, detector = OutcomePoller(db, "p1"), DeadlineDetector(db)
    detector.run_once(clock.now())
    base = clock.now().replace(minute=0) + timedelta(hours=1)
    tick(db, poller, wf, base, [OK], clock)
    tick(db, poller, wf, base + timedelta(minutes=5), [OK], clock)
    sent.clear()
    detector.run_once(base + timedelta(minutes=5, seconds=301))  # both ticks ran: nothing to record
    [(ticks, advances)] = sent
    assert ticks == [] and [a[1] for a in advances] == [base + timedelta(minutes=5, seconds=1)]
    assert detector.last.audited_schedules == 1 and detector.last.missed_ticks == []
    tick(db, poller, wf, base + timedelta(minutes=10), [OK], clock)
    sent.clear()
    detector.run_once(base + timedelta(minutes=15, seconds=301))  # 02:10 ran, 02:15 never did
    [(ticks, _)] = sent
    assert [t[2] for t in ticks] == [base + timedelta(minutes=15)]
    assert detector.last.missed_ticks == [(wf.id, base + timedelta(minutes=15))]


def test_a_pass_with_no_tick_to_record_sends_the_watermarks_update_without_the_insert_of_runs(db, clock, monkeypatch):
    """A pass that records no missed tick moves its watermarks with their update alone (`advance_text`):
    a data-modifying CTE is set up at every execution, so the insert of runs, which would insert none,
    is not sent. A pass that does record one still sends the insert, and its runs come back."""
    from tickwarden.store.base import StoreBase

    sent: list[str] = []
    real = StoreBase._send_text

    def spy(self, text, params):  # type: ignore[no-untyped-def]
        sent.append(text)
        return real(self, text, params)

    monkeypatch.setattr(StoreBase, "_send_text", spy)
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    poller, detector = OutcomePoller(db, "p1"), DeadlineDetector(db)
    detector.run_once(clock.now())
    base = clock.now().replace(minute=0) + timedelta(hours=1)
    tick(db, poller, wf, base, [OK], clock)
    sent.clear()
    detector.run_once(base + timedelta(seconds=301))  # the tick ran: nothing to record
    assert detector.last.audited_schedules == 1 and detector.last.missed_ticks == []
    [advance] = [text for text in sent if "tick_audits" in text]
    assert advance.startswith("UPDATE tick_audits") and "INSERT INTO runs" not in advance
    with db.connection() as conn:
        checked = conn.execute("SELECT checked_until FROM tick_audits ta JOIN schedules s ON s.id = ta.schedule_id"
                               " WHERE s.workflow_id = %s", (wf.id,)).fetchone()[0]
    assert checked == base + timedelta(seconds=1)
    sent.clear()
    detector.run_once(base + timedelta(minutes=5, seconds=301))  # 02:05 never ran
    assert detector.last.missed_ticks == [(wf.id, base + timedelta(minutes=5))]
    assert not [text for text in sent if "tick_audits" in text]  # read, not sent: its runs come back



def listed(db):
    with db.connection() as conn:
        return [r[0] for r in conn.execute("SELECT schedule_id FROM tick_audit_arms ORDER BY schedule_id")]


def watermark(db, wf):
    """(version armed, checked_until, next_check_at, the schedule's version) of the workflow's watermark."""
    with db.connection() as conn:
        return conn.execute(
            "SELECT ta.schedule_version, ta.checked_until, ta.next_check_at, s.version FROM tick_audits ta"
            " JOIN schedules s ON s.id = ta.schedule_id WHERE s.workflow_id = %s", (wf.id,)).fetchone()


def test_a_schedule_write_lists_it_for_arming_and_a_pass_arms_it_from_the_list(db, clock):
    """Created, edited or resumed, a schedule is listed by its write; a pass arms it and empties the list."""
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    (schedule_id,) = listed(db)
    detector = DeadlineDetector(db)
    detector.run_once(clock.now())
    assert listed(db) == []
    version, checked, next_check, current = watermark(db, wf)
    assert (version, checked) == (current, clock.now()) and next_check is not None

    workflow(db, clock.advance(600), cadence=FIVE_MIN, name="check")  # the same schedule: nothing changes
    assert listed(db) == []
    edited = clock.advance(600)
    workflow(db, edited, cadence=HOURLY, name="check")  # a new expression: a new version
    assert listed(db) == [schedule_id]
    detector.run_once(clock.advance(1))
    version, checked, _, current = watermark(db, wf)
    assert listed(db) == [] and (version, checked) == (current, edited)

    catalog.pause(db, "acme", "check", clock.advance(60))
    assert listed(db) == []  # a paused schedule is not armed: a pass disarms its watermark
    detector.run_once(clock.advance(HOURLY))
    assert watermark(db, wf)[2] is None
    resumed = clock.advance(60)
    catalog.resume(db, "acme", "check", resumed)
    assert listed(db) == [schedule_id]
    detector.run_once(clock.advance(1))
    version, checked, next_check, current = watermark(db, wf)
    assert listed(db) == [] and version == current and next_check is not None
    assert checked >= resumed and runs_of(db, wf) == []  # nothing of the pause is missed


def test_a_replica_arming_a_schedule_holds_no_other_replica_back(db, clock):
    """A pass takes only the listed rows it can lock: another replica's pass meanwhile neither waits nor arms."""
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    other = DeadlineDetector(Database(TEST_URL, schema=db.schema, min_size=1, max_size=1))
    try:
        with db.transaction() as store:  # a replica's pass, begun: the schedule armed, not yet committed
            store.monitoring.close_overdue_and_take_audits(clock.now(), 10, "late", clock.now(), 10)
            finished = threading.Event()
            thread = threading.Thread(target=lambda: (other.run_once(clock.now()), finished.set()))
            thread.start()
            thread.join(timeout=20)
            assert finished.is_set()  # it did not wait for the first replica
            assert other.last.audited_schedules == 0
        thread.join()
        version, _, _, current = watermark(db, wf)
        assert version == current and listed(db) == []
        other.run_once(clock.advance(1))  # armed once, walked by whichever pass comes next
        assert other.last.audited_schedules == 1
    finally:
        other.db.close()


def test_schedules_of_one_expression_audited_together_walk_their_ticks_once_a_pass(db, clock, monkeypatch):
    # Two workflows of one expression, a third of another: all published at once, all missed during a trigger outage.
    flows = [workflow(db, clock.now(), name=name, cadence=HOURLY, cron=cron)
             for name, cron in (("a", "0 * * * *"), ("b", "0 * * * *"), ("c", "30 * * * *"))]
    detector = DeadlineDetector(db)
    detector.run_once(clock.now())
    walked = []
    walk = DeadlineDetector._walk
    monkeypatch.setattr(DeadlineDetector, "_walk", lambda self, cron, *rest: walked.append(cron) or walk(self, cron, *rest))
    detector.run_once(clock.now() + timedelta(hours=2))
    assert sorted(walked) == ["0 * * * *", "30 * * * *"]
    assert [len(runs_of(db, wf)) for wf in flows] == [2, 2, 2]
    assert {r.status for wf in flows for r in runs_of(db, wf)} == {"missed"}
