"""Builders for execution tests: a tenant with a publisher, an environment and a workflow."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.helpers import publish
from tickwarden import secrets
from tickwarden.db import Database
from tickwarden.models import Run, Workflow
from tickwarden.store import TickRequest

SECRET = "test-signing-key"


def set_secret(db: Database, tenant_id: int, name: str, value: str, now: datetime) -> None:
    """Store a tenant secret the way `tickwarden secrets set` does, sealed with the test key."""
    with db.transaction() as store:
        secrets.set_secret(store, secrets.Keyring(SECRET), tenant_id, name, value, now)


def python_step(name: str, call: str, *, depends_on: list[str] | None = None, params: dict[str, Any] | None = None,
                timeout: int | None = None) -> dict[str, Any]:
    return {"name": name, "kind": "python", "call": f"tests.steps:{call}", "depends_on": depends_on or [],
            "params": params or {}, "timeout_seconds": timeout}


def make_runnable(db: Database, now: datetime, steps: list[dict[str, Any]], *, tenant: str = "acme",
                  name: str = "nightly", timeout: int | None = 60, idle_timeout: int = 600,
                  publisher_active: bool = True, with_publisher: bool = True, expect_rows: bool = False,
                  keep_outputs: bool = True) -> Workflow:
    with db.transaction() as store:
        t = store.catalog.upsert_tenant(tenant, now)
        user = store.catalog.apply_user(t.id, f"owner@{tenant}.test", f"owner@{tenant}.test", publisher_active, now).row
        env = store.catalog.apply_environment(t.id, "main", None, idle_timeout, now).row
        return publish(store, t.id, name, now, environment_id=env.id,
                       publisher_id=user.id if with_publisher else None,
                       recipe={"steps": steps}, timeout_seconds=timeout, expect_rows=expect_rows,
                       keep_outputs=keep_outputs)


def queue_run(db: Database, workflow: Workflow, scheduled_for: datetime, now: datetime, *, budget: int = 2) -> Run:
    with db.transaction() as store:
        run = store.ledger.create_tick_run(TickRequest(workflow.tenant_id, workflow.id, scheduled_for, budget,
                                                scheduled_for + timedelta(hours=3)), now)
        assert run is not None
        return run
