"""Check-ins through the real pipeline on a virtual clock: the ticker, the poller and the deadline detector."""

import threading
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import lease, publish
from tickwarden import catalog, checkins
from tickwarden.clock import VirtualClock
from tickwarden.db import Database
from tickwarden.deadlines import DeadlineDetector
from tickwarden.errors import Conflict, NotFound, UsageError
from tickwarden.models import Workflow
from tickwarden.poller import OutcomePoller
from tickwarden.ticker import Ticker

DAILY_CRON, FIVE_MIN_CRON = "0 2 * * *", "*/5 * * * *"


def external(db: Database, now: datetime, *, tenant: str = "acme", name: str = "export", cron: str = DAILY_CRON,
             cadence: int = 86400, timeout: int | None = None) -> Workflow:
    with db.transaction() as store:
        t = store.catalog.upsert_tenant(tenant, now)
        return publish(store, t.id, name, now, kind="external", timeout_seconds=timeout, cron=cron,
                       cadence_seconds=cadence)


class Pipeline:
    """The service's loops, each passed every 30 virtual seconds."""

    def __init__(self, db: Database, clock: VirtualClock):
        self.db, self.clock = db, clock
        self.loops = [Ticker(db), OutcomePoller(db, "p1"), DeadlineDetector(db)]

    def until(self, when: datetime) -> None:
        while self.clock.now() < when:
            self.clock.set(min(when, self.clock.now() + timedelta(seconds=30)))
            for loop in self.loops:
                loop.run_once(self.clock.now())

    def report(self, status: str, tick: datetime | None = None, *, name: str = "export", **kwargs) -> checkins.Recorded:
        recorded = checkins.report_by_name(self.db, "acme", name, checkins.Report(status, tick, **kwargs),
                                           self.clock.now())
        self.until(self.clock.now() + timedelta(seconds=1))  # the poller takes the outcome
        return recorded

    def runs(self, wf: Workflow):
        with self.db.transaction() as store:
            return sorted(store.ledger.list_runs(wf.id, limit=100), key=lambda r: r.scheduled_for)

    def alerts(self):
        with self.db.transaction() as store:
            return [view.alert for view in store.monitoring.list_alerts()]


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 11, 30, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def pipeline(db, clock):
    return Pipeline(db, clock)


def test_a_tick_of_an_external_workflow_waits_for_its_report_and_no_worker_can_take_it(db, clock, pipeline):
    wf = external(db, clock.now())
    pipeline.until(at(2, 0, 30))
    [run] = pipeline.runs(wf)
    assert (run.scheduled_for, run.status, run.attempts_count, run.retry_budget) == (at(2), "queued", 0, 0)
    with db.transaction() as store:
        assert store.ledger.list_attempts(run.id) == []
        assert lease(store, "w1", clock.now(), 60, limit=10) == []


def test_it_records_start_then_success_and_no_alert_opens(db, clock, pipeline):
    wf = external(db, clock.now())
    pipeline.until(at(2, 0, 10))
    started = pipeline.report("start")
    assert (started.run.status, started.run.started_at, started.changed) == ("running", at(2, 0, 10), True)
    assert not pipeline.report("start").changed  # a second start changes nothing
    pipeline.until(at(2, 4))
    done = pipeline.report("success", exit_code=0, log="exported 1200 rows")
    assert done.run.status == "succeeded"
    pipeline.until(at(4))
    [run] = pipeline.runs(wf)
    assert run.status == "succeeded"
    with db.transaction() as store:
        [attempt] = store.ledger.list_attempts(run.id)
    assert (attempt.status, attempt.started_at, attempt.finished_at) == ("succeeded", at(2, 0, 10), at(2, 4))
    assert attempt.outputs == {"exit_code": 0} and attempt.log_tail == "exported 1200 rows"
    assert pipeline.alerts() == []


def test_a_missing_report_is_missed_at_the_deadline_and_opens_the_alert(db, clock, pipeline):
    wf = external(db, clock.now(), timeout=1800)
    # no report at all: deadline = tick + grace (clamp(cadence / 4, 60 s, 900 s) = 15 min); neither the
    # timeout (the job never said it started) nor a retry budget (tickwarden never retries it) counts
    pipeline.until(at(2, 14, 30))
    [run] = pipeline.runs(wf)
    assert (run.status, run.deadline_at) == ("queued", at(2, 15))
    assert pipeline.alerts() == []
    pipeline.until(at(2, 15, 30))
    [run] = pipeline.runs(wf)
    assert (run.status, run.error_category) == ("missed", "missed")
    [alert] = pipeline.alerts()
    assert (alert.status, alert.severity, alert.owner) == ("open", "critical", "engineering")
    # a late report does not rewrite the verdict
    with pytest.raises(Conflict, match="already missed"):
        pipeline.report("success", at(2))


def test_a_started_job_has_its_timeout_and_no_retry_budget_before_it_is_missed(db, clock, pipeline):
    wf = external(db, clock.now(), timeout=1800)  # the daily profile retries managed ticks; not this one
    pipeline.until(at(2, 5))
    started = pipeline.report("start")
    # tick + grace (15 min) + timeout (30 min)
    assert started.run.deadline_at == at(2, 45)
    pipeline.until(at(2, 44, 30))
    assert [r.status for r in pipeline.runs(wf)] == ["running"] and pipeline.alerts() == []
    pipeline.until(at(2, 45, 30))
    [run] = pipeline.runs(wf)
    assert (run.status, run.error_category, run.retry_budget) == ("missed", "missed", 0)
    [alert] = pipeline.alerts()
    assert (alert.status, alert.severity, alert.opened_at) == ("open", "critical", at(2, 45))
    managed = catalog.budget_for(86400, {}, True, 1800)
    assert managed.retries > 0 and managed.deadline(at(2)) > at(4)  # what a retry budget would have waited for


def test_a_start_without_an_end_is_missed_too(db, clock, pipeline):
    wf = external(db, clock.now(), timeout=600)
    pipeline.until(at(2, 1))
    pipeline.report("start")
    pipeline.until(at(2, 26))
    [run] = pipeline.runs(wf)
    assert run.status == "missed"
    assert [a.status for a in pipeline.alerts()] == ["open"]


def test_three_failures_open_the_alert_and_a_success_resolves_it(db, clock, pipeline):
    wf = external(db, clock.now(), cron=FIVE_MIN_CRON, cadence=300)
    for minute in (0, 5, 10):
        pipeline.until(at(2, minute, 40))
        failed = pipeline.report("fail", exit_code=3, log="Traceback\nKeyError: 'id'\npassword=hunter2")
        assert failed.run.status == "failed"  # never retried: tickwarden cannot re-run someone else's job
    [alert] = pipeline.alerts()
    assert (alert.status, alert.severity, alert.failure_count, alert.owner) == ("open", "warning", 3, "customer")
    with db.transaction() as store:
        attempt = store.ledger.list_attempts(pipeline.runs(wf)[-1].id)[0]
    assert (attempt.error_category, attempt.retryable) == ("step_error", False)
    assert "exit code 3" in attempt.error
    assert "hunter2" not in attempt.log_tail and "KeyError" in attempt.log_tail
    pipeline.until(at(2, 15, 40))
    pipeline.report("success")
    [alert] = pipeline.alerts()
    assert alert.status == "resolved"
    assert [r.status for r in pipeline.runs(wf)] == ["failed", "failed", "failed", "succeeded"]


def test_a_report_before_the_ticker_records_the_tick_itself_once(db, clock, pipeline):
    wf = external(db, clock.now(), cron=FIVE_MIN_CRON, cadence=300)
    pipeline.until(at(1, 59, 50))
    clock.set(at(2, 0, 1))  # the job reports before the ticker's next pass
    recorded = checkins.report_by_name(db, "acme", "export", checkins.Report("start"), clock.now())
    assert (recorded.run.scheduled_for, recorded.run.status) == (at(2), "running")
    pipeline.until(at(2, 1))
    runs = pipeline.runs(wf)
    assert [(r.scheduled_for, r.status) for r in runs] == [(at(2), "running")]  # one run per tick


def test_an_explicit_tick_must_be_one_of_the_schedules_and_not_in_the_future(db, clock, pipeline):
    external(db, clock.now(), cron=FIVE_MIN_CRON, cadence=300)
    pipeline.until(at(2, 0, 30))
    pipeline.report("start", at(2, 0))
    pipeline.until(at(2, 5, 30))  # the started 02:00 tick is due until 02:06:15 (grace 75 s + timeout 5 min)
    with pytest.raises(UsageError, match="not a tick"):
        pipeline.report("start", at(2, 3))
    with pytest.raises(UsageError, match="future"):
        pipeline.report("start", at(2, 10))
    with pytest.raises(UsageError, match="before"):
        pipeline.report("start", at(1, 50))
    late = pipeline.report("success", at(2, 0))  # the previous tick, named explicitly
    assert (late.run.scheduled_for, late.run.status) == (at(2), "succeeded")


def test_a_managed_workflow_takes_no_check_ins_and_an_external_one_no_manual_run(db, clock):
    from tests.helpers import make_workflow

    make_workflow(db, clock.now(), name="nightly")
    external(db, clock.now())
    with pytest.raises(UsageError, match="only a workflow of kind external"):
        checkins.report_by_name(db, "acme", "nightly", checkins.Report("start"), clock.now())
    with pytest.raises(Conflict, match="external"):
        catalog.run_now(db, "acme", "export", clock.now())


def test_concurrent_terminal_reports_of_one_tick_record_one_outcome(db, clock, pipeline):
    wf = external(db, clock.now())
    pipeline.until(at(2, 1))
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def report(status: str) -> None:
        barrier.wait()
        try:
            checkins.report_by_name(db, "acme", "export", checkins.Report(status), clock.now())
            outcomes.append("recorded")
        except Conflict:
            outcomes.append("refused")

    threads = [threading.Thread(target=report, args=(s,)) for s in ("success", "fail", "success", "fail")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["recorded", "refused", "refused", "refused"]
    [run] = pipeline.runs(wf)
    with db.transaction() as store:
        assert len(store.ledger.list_attempts(run.id)) == 1
    assert run.status in ("succeeded", "failed") and run.attempts_count == 1


def test_a_paused_or_archived_workflow_refuses_reports(db, clock, pipeline):
    external(db, clock.now())
    pipeline.until(at(2, 1))
    catalog.pause(db, "acme", "export", clock.now())
    with pytest.raises(Conflict, match="paused"):
        pipeline.report("start", at(2))
    catalog.resume(db, "acme", "export", clock.now())
    catalog.archive(db, "acme", "export", clock.now())
    with pytest.raises(Conflict, match="archived"):
        pipeline.report("start", at(2))


def test_the_ping_key_is_stored_hashed_and_rotation_replaces_it(db, clock):
    wf = external(db, clock.now())
    issued = checkins.issue_key(db, "acme", "export", clock.now())
    assert len(issued.key) >= 40 and not issued.replaced
    with db.connection() as conn:
        stored = conn.execute("SELECT key_hash FROM checkin_keys WHERE workflow_id = %s", (wf.id,)).fetchone()[0]
    assert stored == checkins.hash_key(issued.key) and issued.key not in stored
    with pytest.raises(Conflict, match="already has a check-in URL"):
        checkins.issue_key(db, "acme", "export", clock.now())
    rotated = checkins.issue_key(db, "acme", "export", clock.now(), rotate=True)
    assert rotated.replaced and rotated.key != issued.key
    clock.set(at(2, 1))
    with pytest.raises(NotFound):
        checkins.report_by_key(db, issued.key, checkins.Report("start"), clock.now())
    assert checkins.report_by_key(db, rotated.key, checkins.Report("start"), clock.now()).run.status == "running"
