"""/metrics reads the fleet's state from the database: outcomes, retries, alerts, lag, backlog, loops."""

from __future__ import annotations

from datetime import timedelta

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.apiutil import live_server, seed_tenant
from tests.helpers import create_run
from tickwarden.models import AttemptOutcome


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
        workflow = store.get_workflow(acme.workflow_id)
    # a finished attempt the poller has not claimed yet: 90 s of lag
    run = create_run(db, workflow, now - timedelta(minutes=10), now - timedelta(minutes=10), budget=1)
    with db.transaction() as store:
        attempt = store.lease_attempts("w", now - timedelta(minutes=10), 60)[0]
        store.finish_attempt(attempt.id, "w", AttemptOutcome(status="failed", error_category="connection",
                                                             error="reset"), now - timedelta(seconds=90))
        store.queue_retries([run.id], now - timedelta(seconds=80))
    with db.connection() as conn, conn.transaction():
        conn.execute("UPDATE attempts SET processed_at = %s WHERE id <> %s", (now, attempt.id))
        conn.execute("INSERT INTO notification_outbox (tenant_id, event_id, alert_id, channel_id, status,"
                     " next_attempt_at, created_at) SELECT tenant_id, id, alert_id, %s, 'pending', %s, %s"
                     " FROM alert_events", (acme.channel_id, now, now))
        conn.execute("INSERT INTO loop_heartbeats (replica_id, loop, last_pass_at, next_pass_at) VALUES"
                     " ('r1', 'poller', %s, %s), ('r1', 'escalation', %s, %s)",
                     (now - timedelta(seconds=10), now + timedelta(seconds=20),
                      now - timedelta(hours=1), now - timedelta(minutes=59)))
    with live_server(db, clock) as base:
        response = httpx.get(base + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    got = samples(response.text)
    assert got[("tickwarden_runs", (("status", "failed"),))] == 2
    assert got[("tickwarden_runs", (("status", "succeeded"),))] == 1
    assert got[("tickwarden_runs", (("status", "queued"),))] == 1  # the retry
    assert got[("tickwarden_retry_attempts", ())] == 1
    assert got[("tickwarden_open_alerts", (("severity", "critical"),))] == 1
    assert got[("tickwarden_open_alerts", (("severity", "warning"),))] == 0
    assert got[("tickwarden_poll_lag_seconds", ())] == 90
    assert got[("tickwarden_outbox_backlog", (("status", "pending"),))] == 1
    assert got[("tickwarden_loop_stalled", (("loop", "escalation"),))] == 1
    assert got[("tickwarden_loop_stalled", (("loop", "poller"),))] == 0
    assert got[("tickwarden_loop_last_pass_age_seconds", (("loop", "poller"),))] == 10
    assert got[("tickwarden_loops_stalled", ())] == 1
    assert "acme" not in response.text, "metrics carry no tenant names"
