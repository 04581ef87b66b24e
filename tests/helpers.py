"""Small builders shared by integration tests."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from tickwarden import catalog
from tickwarden.catalog import Publication
from tickwarden.db import Database
from tickwarden.models import Attempt, Run, Workflow
from tickwarden.store import Store, TickRequest


def publish(store: Store, tenant_id: int, name: str, now: datetime, *, cron: str = "0 2 * * *",
            cadence_seconds: int = 86400, **fields: Any) -> Workflow:
    """Publish a workflow and its schedule through `catalog.publish`, the one write apply and the API use."""
    values: dict[str, Any] = {
        "description": "", "environment_id": None, "publisher_id": None, "recipe": {"steps": []},
        "timeout_seconds": None, "monitoring_enabled": True, "policy_overrides": {}, "shadow": False,
        "expect_rows": False, "archived": False, "timezone": "UTC", "status": "active",
        "starting_deadline_seconds": 300, "kind": "managed",
    }
    values.update(fields)
    pub = Publication(tenant_id=tenant_id, name=name, cron=cron, cadence_seconds=cadence_seconds, **values)
    return catalog.publish(store, pub, now, actor="tests").workflow.row


def republish(store: Store, workflow: Workflow, now: datetime, **changes: Any) -> Workflow:
    """Publish a stored workflow again with some fields changed (as a re-applied file would)."""
    schedule = store.catalog.get_schedule_for_workflow(workflow.id)
    current = store.catalog.get_workflow(workflow.id)
    assert schedule is not None and current is not None
    pub = dataclasses.replace(Publication.stored(current, schedule), **changes)
    return catalog.publish(store, pub, now, actor="tests").workflow.row


def lease(store: Store, worker_id: str, now: datetime, lease_seconds: float, limit: int = 1) -> list[Attempt]:
    """Lease attempts through the worker's own statement, without the ticks it also returns."""
    return [attempt for attempt, _ in store.ledger.lease_attempts_with_ticks(worker_id, now, lease_seconds, limit)]


def streak(store: Store, workflow_id: int) -> int:
    """The workflow's consecutive confirmed failures, as the evaluation counts them (`evaluation_inputs`)."""
    return store.monitoring.evaluation_inputs([workflow_id])[0].failures


def catalog_counts(store: Store) -> dict[str, int]:
    """How many rows the catalog holds, by table: what a refused apply must leave empty."""
    row = store.conn.execute(
        "SELECT (SELECT count(*) FROM tenants), (SELECT count(*) FROM users), (SELECT count(*) FROM environments),"
        " (SELECT count(*) FROM notification_channels), (SELECT count(*) FROM workflows),"
        " (SELECT count(*) FROM schedules)").fetchone()
    assert row is not None
    return dict(zip(("tenants", "users", "environments", "channels", "workflows", "schedules"), row, strict=True))


def make_workflow(db: Database, now: datetime, *, tenant: str = "acme", name: str = "nightly", cron: str = "0 2 * * *",
                  cadence_seconds: int = 86400) -> Workflow:
    with db.transaction() as store:
        t = store.catalog.upsert_tenant(tenant, now)
        return publish(store, t.id, name, now, cron=cron, cadence_seconds=cadence_seconds)


def tick(workflow: Workflow, scheduled_for: datetime, *, budget: int = 2) -> TickRequest:
    return TickRequest(
        tenant_id=workflow.tenant_id,
        workflow_id=workflow.id,
        scheduled_for=scheduled_for,
        retry_budget=budget,
        deadline_at=scheduled_for + timedelta(hours=3),
    )


def create_run(db: Database, workflow: Workflow, scheduled_for: datetime, now: datetime, *, budget: int = 2) -> Run:
    with db.transaction() as store:
        run = store.ledger.create_tick_run(tick(workflow, scheduled_for, budget=budget), now)
        assert run is not None
        return run


