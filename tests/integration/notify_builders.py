"""Builders for notification tests: tenants, channels, alerts and their events, written
directly (the alert state machine is tested elsewhere; here only what it leaves behind)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from tests.helpers import create_run, make_workflow
from tickwarden.db import Database
from tickwarden import alerts
from tickwarden.store.outbox import Channel


def add_channel(db: Database, now: datetime, *, tenant: str | None, name: str, kind: str, audience: str,
                config: dict[str, Any] | None = None, secret_ref: str | None = None) -> Channel:
    with db.transaction() as store:
        tenant_id = store.catalog.upsert_tenant(tenant, now).id if tenant else None
        return store.outbox.upsert_notification_channel(tenant_id=tenant_id, name=name, kind=kind, audience=audience,
                                                 now=now, config=config, secret_ref=secret_ref)


def open_alert(db: Database, now: datetime, *, tenant: str = "acme", workflow: str = "nightly-pipeline",
               severity: str = "warning", owner: str = "engineering", shadow: bool = False,
               error: str = "relation \"sales\" does not exist", log_tail: str = "step join\nERROR: boom",
               outputs: dict[str, Any] | None = None, failure_count: int = 1) -> int:
    """Record a failed run with one failed attempt, open an alert on it; return the alert id."""
    wf = make_workflow(db, now, tenant=tenant, name=workflow)
    run = create_run(db, wf, now - timedelta(minutes=9), now - timedelta(minutes=9))
    with db.connection() as conn:
        conn.execute(
            "UPDATE attempts SET status = 'failed', finished_at = %s, error = %s, log_tail = %s, outputs = %s,"
            " error_category = 'step_error', failed_step = 'join' WHERE run_id = %s",
            (now, error, log_tail, Jsonb(outputs or {}), run.id),
        )
        conn.execute("UPDATE runs SET status = 'failed', finished_at = %s, error = %s WHERE id = %s",
                     (now, error, run.id))
        row = conn.execute(
            """INSERT INTO alerts (tenant_id, workflow_id, status, first_severity, severity, owner, failure_count,
                                   cadence_seconds, escalation_multiplier, escalate_after, escalate_at, shadow,
                                   first_failure_at, last_failure_at, last_run_id, last_error_category, last_error,
                                   failed_step, opened_at)
               VALUES (%s, %s, 'open', %s, %s, %s, %s, 86400, 0.5, 3, %s, %s, %s, %s, %s, 'step_error', %s, 'join', %s)
               RETURNING id""",
            (wf.tenant_id, wf.id, severity, severity, owner, failure_count, now + timedelta(hours=12), shadow,
             now, now, run.id, error, now),
        ).fetchone()
    alert_id = row[0]
    add_event(db, alert_id, "opened", now)
    return alert_id


def add_event(db: Database, alert_id: int, kind: str, now: datetime, *, note: str | None = None,
              actor: str = "tickwarden") -> int:
    """Move the alert the way the state machine would, record the event and fan it out."""
    with db.connection() as conn:
        if kind == "escalated":
            conn.execute("UPDATE alerts SET severity = 'critical', escalated_at = %s, failure_count = failure_count + 1,"
                         " last_failure_at = %s WHERE id = %s", (now, now, alert_id))
        elif kind == "reassigned":
            conn.execute("UPDATE alerts SET owner = CASE owner WHEN 'engineering' THEN 'customer' ELSE 'engineering' END"
                         " WHERE id = %s", (alert_id,))
        elif kind == "resolved":
            conn.execute("UPDATE alerts SET status = 'resolved', resolved_at = %s,"
                         " downtime_seconds = extract(epoch FROM %s - first_failure_at)::int WHERE id = %s",
                         (now, now, alert_id))
        row = conn.execute(
            """INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, actor, note)
               SELECT tenant_id, id, %s, %s, severity, owner, %s, %s FROM alerts WHERE id = %s RETURNING id""",
            (kind, now, actor, note, alert_id),
        ).fetchone()
    with db.transaction() as store:
        alerts.notify(store, [row[0]], now)
    return row[0]


def outbox(db: Database) -> list[dict[str, Any]]:
    with db.connection() as conn:
        cur = conn.execute("SELECT o.*, e.kind FROM notification_outbox o JOIN alert_events e ON e.id = o.event_id"
                           " ORDER BY o.id")
        names = [c.name for c in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def channel_row(db: Database, channel_id: int) -> dict[str, Any]:
    with db.connection() as conn:
        cur = conn.execute("SELECT * FROM notification_channels WHERE id = %s", (channel_id,))
        names = [c.name for c in cur.description]
        return dict(zip(names, cur.fetchone(), strict=True))
