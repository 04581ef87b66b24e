"""/metrics: the fleet's state read from the database, and the work each process counted itself."""

from __future__ import annotations

import platform
import socket
from datetime import timedelta

import httpx
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.apiutil import live_server, seed_tenant
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tests.helpers import create_run, lease, make_workflow
from tests.integration.notify_builders import add_channel, open_alert
from tickwarden import __version__, metrics
from tickwarden.deadlines import DeadlineDetector
from tickwarden.models import AttemptOutcome
from tickwarden.notifier import Notifier
from tickwarden.poller import OutcomePoller
from tickwarden.reaper import LeaseReaper
from tickwarden.store.queries import queries
from tickwarden.transports.recording import RecordingTransport
from tickwarden.worker import Result, Worker


def samples(text):
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_report_runs_alerts_lag_backlog_and_stalled_loops(db, clock):
    now = clock.now()
    acme = seed_tenant(db, now, "acme")
    workflow = None
    with db.transaction() as store:
        workflow = store.catalog.get_workflow(acme.workflow_id)
    # a finished attempt the poller has not claimed yet: 90 s of lag
    run = create_run(db, workflow, now - timedelta(minutes=10), now - timedelta(minutes=10), budget=1)
    with db.transaction() as store:
        attempt = lease(store, "w", now - timedelta(minutes=10), 60)[0]
        store.ledger.finish_attempt(attempt, "w", AttemptOutcome(status="failed", error_category="connection",
                                                             error="reset"), now - timedelta(seconds=90))
        store.ledger.queue_retries([(run.id, run.scheduled_for)], now - timedelta(seconds=80))
    with db.transaction() as store:
        pager = store.outbox.upsert_notification_channel(tenant_id=acme.tenant_id, name="pager", kind="webhook",
                                                         audience="customer", now=now,
                                                         config={"url": "https://hooks.example/p"}).id
    with db.connection() as conn, conn.transaction():
        conn.execute("DELETE FROM outcome_queue WHERE attempt_id <> %s", (attempt.id,))
        conn.execute("INSERT INTO notification_outbox (tenant_id, event_id, alert_id, channel_id, status,"
                     " next_attempt_at, created_at) SELECT tenant_id, id, alert_id, %s, 'pending', %s, %s"
                     " FROM alert_events", (acme.channel_id, now, now))
        # the same events held for a second channel by a maintenance window
        conn.execute("INSERT INTO notification_outbox (tenant_id, event_id, alert_id, channel_id, status,"
                     " next_attempt_at, created_at) SELECT tenant_id, id, alert_id, %s, 'held', '9999-12-31T00:00:00Z', %s"
                     " FROM alert_events", (pager, now))
        conn.execute("INSERT INTO loop_heartbeats (replica_id, loop, last_pass_at, next_pass_at) VALUES"
                     " ('r1', 'poller', %s, %s), ('r1', 'escalation', %s, %s)",
                     (now - timedelta(seconds=10), now + timedelta(seconds=20),
                      now - timedelta(hours=1), now - timedelta(minutes=59)))
    with live_server(db, clock) as base:
        response = httpx.get(base + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    got = samples(response.text)
    assert got[("tickwarden_runs_in_flight", (("status", "queued"),))] == 1  # the retry
    assert got[("tickwarden_runs_in_flight", (("status", "running"),))] == 0
    assert got[("tickwarden_open_alerts", (("severity", "critical"),))] == 1
    assert got[("tickwarden_open_alerts", (("severity", "warning"),))] == 0
    assert got[("tickwarden_poll_lag_seconds", ())] == 90
    assert got[("tickwarden_outbox_backlog", (("status", "pending"),))] == 1
    assert got[("tickwarden_outbox_backlog", (("status", "held"),))] == 1
    assert got[("tickwarden_loop_stalled", (("loop", "escalation"),))] == 1
    assert got[("tickwarden_loop_stalled", (("loop", "poller"),))] == 0
    assert got[("tickwarden_loop_last_pass_age_seconds", (("loop", "poller"),))] == 10
    assert got[("tickwarden_loops_stalled", ())] == 1
    assert "acme" not in response.text, "metrics carry no tenant names"


def delta(before, after, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0) - before.get(key, 0)


def own():
    """This process's own series (the counters the loops in this test increment)."""
    return samples(generate_latest(metrics.current().registry).decode())


def test_each_tenant_reports_its_newest_success_by_id_never_by_name(db, clock):
    now = clock.now()
    workflow = make_workflow(db, now, tenant="acme")
    make_workflow(db, now, tenant="globex")  # no success yet: no series rather than a zero
    older = create_run(db, workflow, now - timedelta(hours=2), now - timedelta(hours=2))
    newer = create_run(db, workflow, now - timedelta(hours=1), now - timedelta(hours=1))
    with db.connection() as conn:
        conn.execute("UPDATE runs SET status = 'succeeded', finished_at = %s WHERE id = %s",
                     (now - timedelta(minutes=100), older.id))
        conn.execute("UPDATE runs SET status = 'succeeded', finished_at = %s WHERE id = %s",
                     (now - timedelta(minutes=40), newer.id))
    text = metrics.render(metrics.registry_for(db, clock)).decode()
    got = samples(text)
    found = {k: v for k, v in got.items() if k[0] == "tickwarden_tenant_last_success_timestamp_seconds"}
    assert found == {("tickwarden_tenant_last_success_timestamp_seconds", (("tenant_id", str(workflow.tenant_id)),)):
                     (now - timedelta(minutes=40)).timestamp()}
    assert "acme" not in text and "globex" not in text


def test_scrape_statements_read_indexes_never_the_whole_ledger(db, clock):
    # With sequential scans priced out, a statement that has no index path still shows a Seq Scan.
    names = ("api_metrics_runs_in_flight", "api_metrics_tenant_last_success", "api_metrics_poll_lag")
    with db.connection() as conn:
        conn.execute("SET enable_seqscan = off")
        for name in names:
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + queries()[name]).fetchall())
            assert "Seq Scan on runs" not in plan and "Seq Scan on attempts" not in plan, (name, plan)


def test_the_loop_replica_label_is_stable_across_restarts(db, clock):
    now = clock.now()
    with db.connection() as conn:
        conn.execute("INSERT INTO loop_heartbeats (replica_id, loop, last_pass_at, next_pass_at) VALUES"
                     " ('serve@web-1:4121:a1b2c3', 'poller', %s, %s), ('serve@web-1:977:ffee00', 'poller', %s, %s)",
                     (now - timedelta(minutes=5), now, now - timedelta(seconds=5), now + timedelta(seconds=25)))
    got = samples(metrics.render(metrics.registry_for(db, clock)).decode())
    passes = {k: v for k, v in got.items() if k[0] == "tickwarden_loop_last_pass_timestamp_seconds"}
    assert passes == {("tickwarden_loop_last_pass_timestamp_seconds", (("loop", "poller"), ("replica", "serve@web-1"))):
                      (now - timedelta(seconds=5)).timestamp()}


def test_the_process_exposes_build_info_process_metrics_and_a_configured_replica(monkeypatch):
    monkeypatch.setenv("TICKWARDEN_REPLICA", "web-1")
    registry = metrics.ProcessMetrics(metrics.replica_label()).registry
    got = samples(generate_latest(registry).decode())
    assert got[("tickwarden_build_info", (("python", platform.python_version()), ("replica", "web-1"),
                                          ("version", __version__)))] == 1
    assert ("process_cpu_seconds_total", ()) in got and ("process_resident_memory_bytes", ()) in got
    assert got[("tickwarden_runs_total", (("replica", "web-1"), ("status", "failed")))] == 0
    monkeypatch.delenv("TICKWARDEN_REPLICA")
    assert metrics.replica_label() == socket.gethostname()


def test_the_worker_counts_attempts_verdicts_duration_and_schedule_lag(db, clock):
    workflow = make_runnable(db, clock.now(), [python_step("a", "noop")])
    tick = clock.now()
    run = queue_run(db, workflow, tick, tick)
    clock.advance(7)  # the worker starts 7 s after the tick
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    before = own()
    try:
        worker.run_once(clock.now())
    finally:
        worker.environments.close(clock.now())
    after = own()
    replica = metrics.current().replica
    with db.transaction() as store:
        finished = store.ledger.get_run(run.id)
    assert finished.status == "succeeded"
    assert delta(before, after, "tickwarden_attempts_total", status="succeeded", replica=replica) == 1
    assert delta(before, after, "tickwarden_runs_total", status="succeeded", replica=replica) == 1
    assert delta(before, after, "tickwarden_schedule_lag_seconds_count", replica=replica) == 1
    assert delta(before, after, "tickwarden_schedule_lag_seconds_bucket", replica=replica, le="5.0") == 0
    assert delta(before, after, "tickwarden_schedule_lag_seconds_bucket", replica=replica, le="10.0") == 1
    assert delta(before, after, "tickwarden_run_duration_seconds_count", status="succeeded", replica=replica) == 1


def test_a_second_delivery_of_the_same_outcome_is_not_counted_again(db, clock):
    workflow = make_runnable(db, clock.now(), [python_step("a", "noop")])
    queue_run(db, workflow, clock.now(), clock.now())
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    with db.transaction() as store:
        attempt = lease(store, "w1", clock.now(), 60)[0]
    result = Result(outcome=AttemptOutcome(status="failed", error_category="step_error", error="boom",
                                           retryable=False), steps=[])
    before = own()
    assert worker.record(attempt, result).applied
    assert not worker.record(attempt, result).applied
    after = own()
    replica = metrics.current().replica
    assert delta(before, after, "tickwarden_attempts_total", status="failed", replica=replica) == 1
    assert delta(before, after, "tickwarden_runs_total", status="failed", replica=replica) == 1


def test_the_poller_counts_the_retries_it_launches(db, clock):
    now = clock.now()
    workflow = make_workflow(db, now)
    create_run(db, workflow, now, now, budget=1)
    with db.transaction() as store:
        attempt = lease(store, "w", now, 60)[0]
        store.ledger.finish_attempt(attempt, "w", AttemptOutcome(status="failed", error_category="connection",
                                                             error="reset"), now)
    before = own()
    OutcomePoller(db, "p1").run_once(clock.advance(1))
    after = own()
    assert delta(before, after, "tickwarden_retries_total", replica=metrics.current().replica) == 1


def test_the_notifier_counts_deliveries_and_their_latency(db, clock):
    add_channel(db, clock.now(), tenant=None, name="platform", kind="recording", audience="engineering")
    open_alert(db, clock.now())
    clock.advance(3)
    before = own()
    Notifier(db, "n1", {"recording": RecordingTransport()}).run_once(clock.now())
    after = own()
    replica = metrics.current().replica
    assert delta(before, after, "tickwarden_notifications_total", kind="recording", outcome="sent",
                 replica=replica) == 1
    assert delta(before, after, "tickwarden_delivery_latency_seconds_bucket", kind="recording", replica=replica,
                 le="2.0") == 0
    assert delta(before, after, "tickwarden_delivery_latency_seconds_bucket", kind="recording", replica=replica,
                 le="5.0") == 1


def test_the_metrics_endpoint_serves_this_process_counters_beside_the_fleet_gauges(db, clock):
    with live_server(db, clock) as base:
        text = httpx.get(base + "/metrics").text
    got = samples(text)
    assert ("tickwarden_open_alerts", (("severity", "critical"),)) in got
    assert any(name == "tickwarden_build_info" for name, _ in got)
    assert any(name == "tickwarden_runs_total" for name, _ in got)
    assert "_created" not in text


def test_the_deadline_detector_counts_the_runs_it_declares_missed(db, clock):
    workflow = make_workflow(db, clock.now())
    run = create_run(db, workflow, clock.now(), clock.now())
    before = own()
    DeadlineDetector(db).run_once(run.deadline_at + timedelta(seconds=1))
    after = own()
    with db.connection() as conn:
        # the overdue run, and the 02:00 tick that never ran
        missed = conn.execute("SELECT count(*) FROM runs WHERE status = 'missed'").fetchone()[0]
    assert missed == 2
    assert delta(before, after, "tickwarden_runs_total", status="missed", replica=metrics.current().replica) == 2


def test_the_reaper_counts_lost_attempts_and_the_verdicts_they_give(db, clock):
    workflow = make_workflow(db, clock.now())
    create_run(db, workflow, clock.now(), clock.now(), budget=0)
    before = own()
    leased = 0
    # A lost attempt is queued again for free (at most twice), so the run fails on the third loss.
    now = clock.now()
    for _ in range(4):
        with db.transaction() as store:
            leased += len(lease(store, "w", now, 30))
        now += timedelta(minutes=1)
        LeaseReaper(db).run_once(now)
        OutcomePoller(db, "p1").run_once(now)  # launches the free re-queue the reaper decided
    after = own()
    replica = metrics.current().replica
    assert leased == 3
    assert delta(before, after, "tickwarden_attempts_total", status="lost", replica=replica) == 3
    assert delta(before, after, "tickwarden_runs_total", status="failed", replica=replica) == 1
