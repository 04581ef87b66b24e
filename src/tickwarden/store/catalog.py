"""Catalog operations: tenants, users, environments, workflows and schedules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from tickwarden.cadence import parse_schedule
from tickwarden.models import Environment, Schedule, Tenant, User, Workflow, from_row
from tickwarden.store.base import StoreBase


def first_fire_after(cron: str, timezone: str, now: datetime) -> datetime | None:
    """Return the first tick a schedule written at `now` fires: strictly after the write, never a burst."""
    return parse_schedule(cron, timezone).next_after(now)


@dataclass(frozen=True)
class Applied:
    """The result of upserting one declared object: its id, and created, updated or unchanged."""

    kind: str
    id: int
    change: str
    row: Any = None


@dataclass(frozen=True)
class WorkflowSummary:
    """A workflow as listed by `tickwarden workflows`: its schedule and newest run."""

    tenant: str
    workflow_id: int
    workflow: str
    description: str
    cron: str | None
    timezone: str | None
    schedule_status: str | None
    cadence_seconds: int | None
    schedule_version: int | None
    monitoring_enabled: bool
    timeout_seconds: int | None
    shadow: bool
    archived_at: datetime | None
    environment: str | None
    publisher: str | None
    last_scheduled_for: datetime | None
    last_status: str | None


def _one(model: type, rows: list[dict[str, Any]]) -> Any:
    return from_row(model, rows[0]) if rows else None


class CatalogRepository(StoreBase):
    def upsert_tenant(self, name: str, now: datetime, *, display_name: str | None = None, shadow: bool = False) -> Tenant:
        """Create or update a tenant (the same statement `apply` uses)."""
        return self.apply_tenant(name, display_name or name, shadow, now).row

    def get_tenant_by_name(self, name: str) -> Tenant | None:
        row = self._row("catalog_get_tenant_by_name", {"name": name})
        return from_row(Tenant, row) if row else None

    def get_tenant(self, tenant_id: int) -> Tenant | None:
        row = self._row("catalog_get_tenant", {"tenant_id": tenant_id})
        return from_row(Tenant, row) if row else None

    def get_environment(self, environment_id: int) -> Environment | None:
        row = self._row("catalog_get_environment", {"environment_id": environment_id})
        return from_row(Environment, row) if row else None

    def get_workflow(self, workflow_id: int) -> Workflow | None:
        row = self._row("catalog_get_workflow", {"workflow_id": workflow_id})
        return from_row(Workflow, row) if row else None

    def get_workflow_by_name(self, tenant: str, workflow: str) -> Workflow | None:
        row = self._row("catalog_get_workflow_by_name", {"tenant": tenant, "workflow": workflow})
        return from_row(Workflow, row) if row else None

    def lock_workflow(self, tenant_id: int, name: str) -> Workflow | None:
        """A tenant's workflow by name, locked until the transaction ends (see `catalog.publish`)."""
        return self.send_lock_workflow(tenant_id, name)()

    def send_lock_workflow(self, tenant_id: int, name: str) -> Callable[[], Workflow | None]:
        """Send the lock of a tenant's workflow by name (held until the transaction ends); the reader of its row.

        Sent now, read later (see `StoreBase._submit_text`): `catalog.publish_all` sends
        the locks of all it publishes before reading any, one round trip in pipeline mode.
        """
        read = self._submit("catalog_lock_workflow", {"tenant_id": tenant_id, "name": name})
        return lambda: _one(Workflow, read())

    def list_workflows(self, tenant_id: int) -> list[Workflow]:
        return [from_row(Workflow, row) for row in self._rows("catalog_list_workflows", {"tenant_id": tenant_id})]

    def get_schedule_for_workflow(self, workflow_id: int) -> Schedule | None:
        row = self._row("catalog_get_schedule_for_workflow", {"workflow_id": workflow_id})
        return from_row(Schedule, row) if row else None

    def send_get_schedule_for_workflow(self, workflow_id: int) -> Callable[[], Schedule | None]:
        """`get_schedule_for_workflow`, sent now and read later (see `send_lock_workflow`)."""
        read = self._submit("catalog_get_schedule_for_workflow", {"workflow_id": workflow_id})
        return lambda: _one(Schedule, read())

    def archive_workflow(self, workflow_id: int, now: datetime) -> Workflow | None:
        """Archive a workflow; None when it already was."""
        row = self._row("catalog_archive_workflow", {"workflow_id": workflow_id, "now": now})
        return from_row(Workflow, row) if row else None

    # Workflow files: upserts that say whether they created, updated or left a row alone.

    def _applied(self, kind: str, model: type | None, name: str, params: dict[str, Any]) -> Applied:
        return self._send_applied(kind, model, name, params)()

    def _send_applied(self, kind: str, model: type | None, name: str,
                      params: dict[str, Any]) -> Callable[[], Applied]:
        read = self._submit(name, params)

        def applied() -> Applied:
            row = read()[0]
            change = row.pop("change")
            return Applied(kind=kind, id=row["id"], change=change, row=from_row(model, row) if model else None)

        return applied

    def apply_tenant(self, name: str, display_name: str, shadow: bool, now: datetime) -> Applied:
        return self._applied(
            "tenant", Tenant, "catalog_apply_tenant",
            {"name": name, "display_name": display_name, "shadow": shadow, "now": now},
        )

    def apply_user(self, tenant_id: int, email: str, display_name: str, active: bool, now: datetime) -> Applied:
        return self._applied(
            "user", User, "catalog_apply_user",
            {"tenant_id": tenant_id, "email": email, "display_name": display_name, "active": active, "now": now},
        )

    def apply_environment(
        self, tenant_id: int, name: str, python: str | None, idle_timeout_seconds: int, now: datetime,
        runtime: str = "process", pod: dict[str, Any] | None = None,
    ) -> Applied:
        return self._applied(
            "environment", Environment, "catalog_apply_environment",
            {"tenant_id": tenant_id, "name": name, "python": python,
             "idle_timeout_seconds": idle_timeout_seconds, "now": now, "runtime": runtime,
             "pod": Jsonb(pod) if pod is not None else None},
        )

    def apply_channel(
        self,
        tenant_id: int | None,
        name: str,
        *,
        kind: str,
        audience: str,
        config: dict[str, Any],
        secret_ref: str | None,
        now: datetime,
        severities: list[str] | None = None,
        events: list[str] | None = None,
    ) -> Applied:
        return self._applied(
            "channel", None, "catalog_apply_channel",
            {"tenant_id": tenant_id, "name": name, "kind": kind, "audience": audience,
             "config": Jsonb(config), "secret_ref": secret_ref, "now": now,
             "severities": severities, "events": events},
        )

    def apply_workflow(self, *args: Any, **kwargs: Any) -> Applied:
        """Upsert a workflow (`send_apply_workflow`'s arguments) and say what it did."""
        return self.send_apply_workflow(*args, **kwargs)()

    def send_apply_workflow(
        self,
        tenant_id: int,
        name: str,
        now: datetime,
        *,
        description: str,
        environment_id: int | None,  # none for an external workflow or a self-test's
        publisher_id: int | None,
        recipe: dict[str, Any],
        timeout_seconds: int | None,
        monitoring_enabled: bool,
        policy_overrides: dict[str, Any],
        shadow: bool,
        expect_rows: bool = False,
        kind: str = "managed",
        keep_outputs: bool = False,
    ) -> Callable[[], Applied]:
        """Send the upsert of a workflow; the reader of what it did (sent now, read later: see `send_lock_workflow`)."""
        return self._send_applied(
            "workflow", Workflow, "catalog_apply_workflow",
            {"tenant_id": tenant_id, "name": name, "description": description, "environment_id": environment_id,
             "publisher_id": publisher_id, "recipe": Jsonb(recipe), "timeout_seconds": timeout_seconds,
             "monitoring_enabled": monitoring_enabled, "policy_overrides": Jsonb(policy_overrides),
             "shadow": shadow, "expect_rows": expect_rows, "kind": kind, "keep_outputs": keep_outputs,
             "now": now},
        )

    def apply_schedule(self, **kwargs: Any) -> Applied:
        """Upsert a schedule (`send_apply_schedule`'s arguments) and say what it did."""
        return self.send_apply_schedule(**kwargs)()

    def send_apply_schedule(
        self,
        *,
        tenant_id: int,
        workflow_id: int,
        cron: str,
        timezone: str,
        status: str,
        cadence_seconds: int,
        starting_deadline_seconds: int,
        now: datetime,
    ) -> Callable[[], Applied]:
        """Send the upsert of a schedule; the reader of what it did (sent now, read later: see `send_lock_workflow`)."""
        return self._send_applied(
            "schedule", Schedule, "catalog_apply_schedule",
            {"tenant_id": tenant_id, "workflow_id": workflow_id, "cron": cron, "timezone": timezone,
             "status": status, "cadence_seconds": cadence_seconds,
             "starting_deadline_seconds": starting_deadline_seconds, "now": now,
             "next_fire_at": first_fire_after(cron, timezone, now)},
        )

    def workflow_summaries(self, tenant: str | None = None) -> list[WorkflowSummary]:
        return [from_row(WorkflowSummary, row) for row in self._rows("catalog_workflow_summaries", {"tenant": tenant})]

    def counts(self) -> dict[str, int]:
        row = self._row("catalog_count_rows")
        assert row is not None
        return {key: int(value) for key, value in row.items()}
