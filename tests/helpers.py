"""Small builders shared by integration tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from tickwarden.db import Database
from tickwarden.models import Run, Workflow
from tickwarden.store import TickRequest


def make_workflow(db: Database, now: datetime, *, tenant: str = "acme", name: str = "nightly", cron: str = "0 2 * * *",
                  cadence_seconds: int = 86400) -> Workflow:
    with db.transaction() as store:
        t = store.upsert_tenant(tenant, now)
        workflow = store.upsert_workflow(t.id, name, now)
        store.upsert_schedule(tenant_id=t.id, workflow_id=workflow.id, cron=cron, timezone="UTC",
                              cadence_seconds=cadence_seconds, now=now)
        return workflow


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
        run = store.create_tick_run(tick(workflow, scheduled_for, budget=budget), now)
        assert run is not None
        return run
