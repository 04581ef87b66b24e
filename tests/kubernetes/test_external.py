"""External workflows under the Kubernetes trigger: no CronJob, ticks from check-ins, absent ones missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.kubernetes.conftest import make_reconciler
from tickwarden import catalog, checkins
from tickwarden.clock import VirtualClock
from tickwarden.deadlines import NEVER_RAN_ERROR, DeadlineDetector
from tickwarden.errors import Conflict
from tickwarden.poller import OutcomePoller
from tickwarden.triggers.kubernetes_tick import record_tick

PUBLISHED = datetime(2026, 11, 30, 11, 50, 10, tzinfo=UTC)
TICK = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: report
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 12 * * *"}
    timeout_seconds: 600
%(report)s
  - name: managed
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 * * * *"}
    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]
"""
EXTERNAL = "    kind: external"
MANAGED = '    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]'


def apply(db, tmp_path: Path, now: datetime, body: str = EXTERNAL) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE % {"report": body})
    catalog.apply_file(db, path, now)


def schedule_id(db, workflow: str) -> int:
    with db.transaction() as store:
        return store.catalog.get_schedule_for_workflow(store.catalog.get_workflow_by_name("acme", workflow).id).id


def runs(db, workflow: str = "report"):
    return sorted(catalog.list_runs(db, "acme", workflow, limit=100), key=lambda r: r.scheduled_for)


class Loops:
    """The loops a Kubernetes-triggered service runs besides the reconciler (no ticker), every 30 virtual seconds."""

    def __init__(self, db, clock: VirtualClock):
        self.db, self.clock = db, clock
        self.loops = [OutcomePoller(db, "p1"), DeadlineDetector(db)]

    def until(self, when: datetime) -> None:
        while self.clock.now() < when:
            self.clock.set(min(when, self.clock.now() + timedelta(seconds=30)))
            for loop in self.loops:
                loop.run_once(self.clock.now())

    def alerts(self):
        with self.db.transaction() as store:
            return [view.alert for view in store.monitoring.list_alerts()]


def test_an_external_workflow_gets_no_cronjob_and_loses_it_when_a_managed_one_becomes_external(
        db, cluster, settings, tmp_path):
    apply(db, tmp_path, PUBLISHED)
    reconciler = make_reconciler(db, cluster, settings)
    reconciler.run_once(PUBLISHED)
    assert reconciler.last.created == [schedule_id(db, "managed")]
    assert set(cluster.cronjobs()) == {f"tickwarden-s{schedule_id(db, 'managed')}"}
    reconciler.run_once(PUBLISHED + timedelta(minutes=1))
    assert reconciler.last.changed == 0  # the external one is not missing: it is not wanted

    # a managed workflow that becomes external loses its CronJob, and regains it when it turns back
    apply(db, tmp_path, PUBLISHED + timedelta(minutes=2), MANAGED)
    reconciler.run_once(PUBLISHED + timedelta(minutes=2))
    report_job = f"tickwarden-s{schedule_id(db, 'report')}"
    assert report_job in cluster.cronjobs()
    apply(db, tmp_path, PUBLISHED + timedelta(minutes=3), EXTERNAL)
    reconciler.run_once(PUBLISHED + timedelta(minutes=3))
    assert reconciler.last.deleted == [schedule_id(db, "report")]
    assert report_job not in cluster.cronjobs()
    assert f"tickwarden-s{schedule_id(db, 'managed')}" in cluster.cronjobs()


def test_a_leftover_cronjob_of_an_external_workflow_records_nothing(db, tmp_path):
    apply(db, tmp_path, PUBLISHED)
    outcome = record_tick(db, schedule_id(db, "report"), TICK, TICK + timedelta(seconds=5), worker_id="pod-1")
    assert outcome.status == "refused" and "check-ins" in outcome.reason
    assert runs(db) == []


@pytest.fixture
def loops(db, tmp_path) -> Loops:
    apply(db, tmp_path, PUBLISHED)
    return Loops(db, VirtualClock(PUBLISHED))


def test_without_any_trigger_a_missing_check_in_is_missed_at_its_deadline_and_alerts(db, loops):
    # daily cadence: grace clamp(86400 / 4, 60, 900) = 900 s; no retry budget counts
    loops.until(TICK + timedelta(minutes=14, seconds=30))
    assert runs(db) == [] and loops.alerts() == []
    loops.until(TICK + timedelta(minutes=15, seconds=30))
    [run] = runs(db)
    assert (run.scheduled_for, run.status, run.error) == (TICK, "missed", NEVER_RAN_ERROR)
    [alert] = loops.alerts()  # a daily job alerts at its first miss
    assert (alert.status, alert.severity, alert.opened_at) == ("open", "critical", TICK + timedelta(minutes=15))
    # the managed workflow's tick, which no CronJob recorded here either, was missed at its starting deadline
    assert [r.status for r in runs(db, "managed")] == ["missed"]


def test_a_report_within_the_grace_records_the_tick_that_no_trigger_recorded(db, loops):
    # a job that reports only its end, ten minutes after the tick, within the grace: accepted, not "already missed"
    loops.until(TICK + timedelta(minutes=10))
    done = checkins.report_by_name(db, "acme", "report", checkins.Report("success", TICK), loops.clock.now())
    assert (done.run.scheduled_for, done.run.status) == (TICK, "succeeded")
    loops.until(TICK + timedelta(minutes=30))
    assert [(r.scheduled_for, r.status) for r in runs(db)] == [(TICK, "succeeded")]
    assert loops.alerts() == []


def test_a_started_job_has_its_timeout_and_then_is_missed(db, loops):
    loops.until(TICK + timedelta(minutes=2))
    started = checkins.report_by_name(db, "acme", "report", checkins.Report("start"), loops.clock.now())
    assert started.run.status == "running"
    # deadline: tick + grace (15 min) + timeout (10 min), past the audit's 15 min
    assert started.run.deadline_at == TICK + timedelta(minutes=25)
    loops.until(TICK + timedelta(minutes=24, seconds=30))
    assert [r.status for r in runs(db)] == ["running"]
    loops.until(TICK + timedelta(minutes=25, seconds=30))
    assert [r.status for r in runs(db)] == ["missed"]
    with pytest.raises(Conflict, match="already missed"):
        checkins.report_by_name(db, "acme", "report", checkins.Report("success", TICK), loops.clock.now())
