"""Catalog operations: tenants, users, environments, workflows and schedules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from tickwarden.cadence import parse_schedule
from tickwarden.models import Environment, Schedule, Tenant, User, Workflow, from_row
from tickwarden.store.arrays import BigintArray, TextArray
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


@dataclass(frozen=True)
class WorkflowContent:
    """What an upsert of a workflow writes (`CatalogRepository.apply_workflows`), its tenant's id resolved."""

    tenant_id: int
    name: str
    description: str
    environment_id: int | None  # none for an external workflow or a self-test's
    publisher_id: int | None
    recipe: dict[str, Any]
    timeout_seconds: int | None
    monitoring_enabled: bool
    policy_overrides: dict[str, Any]
    shadow: bool
    expect_rows: bool = False
    kind: str = "managed"
    keep_outputs: bool = False


@dataclass(frozen=True)
class ScheduleContent:
    """What an upsert of a workflow's schedule writes (`CatalogRepository.apply_schedules`)."""

    tenant_id: int
    workflow_id: int
    cron: str
    timezone: str
    status: str
    cadence_seconds: int
    starting_deadline_seconds: int
    # Its first tick strictly after the write (`first_fire_after`), for a new or changed one:
    # set by `apply_schedules`, not by its callers.
    next_fire_at: datetime | None = None


def _in_order(rows: list[dict[str, Any]], count: int) -> list[dict[str, Any] | None]:
    """Rows that carry `ord` (their input's position, from 1) placed at it: None where an input had none."""
    placed: list[dict[str, Any] | None] = [None] * count
    for row in rows:
        placed[row.pop("ord") - 1] = row
    return placed


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
        return self.lock_workflows([(tenant_id, name)])[0]

    def lock_workflows(self, keys: Sequence[tuple[int, str]]) -> list[Workflow | None]:
        """Tenants' workflows by (tenant id, name), locked until the transaction ends, in the order given.

        One statement for them all (`catalog.publish_all`), locking in that order; None
        where a key has no workflow.
        """
        rows = self._rows("catalog_lock_workflow", {"tenant_ids": BigintArray(k[0] for k in keys),
                                                     "names": TextArray(k[1] for k in keys)})
        return [from_row(Workflow, row) if row else None for row in _in_order(rows, len(keys))]

    def list_workflows(self, tenant_id: int) -> list[Workflow]:
        return [from_row(Workflow, row) for row in self._rows("catalog_list_workflows", {"tenant_id": tenant_id})]

    def get_schedule_for_workflow(self, workflow_id: int) -> Schedule | None:
        row = self._row("catalog_get_schedule_for_workflow", {"workflow_id": workflow_id})
        return from_row(Schedule, row) if row else None

    def get_schedules_for_workflows(self, workflow_ids: Sequence[int]) -> dict[int, Schedule]:
        """The schedules of several workflows by workflow id, in one statement (none for a workflow without one)."""
        rows = self._rows("catalog_get_schedules_for_workflows", {"workflow_ids": BigintArray(workflow_ids)})
        return {row["workflow_id"]: from_row(Schedule, row) for row in rows}

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

    def _applied_all(self, kind: str, model: type, name: str, rows: Sequence[Any], now: datetime) -> list[Applied]:
        """Run set-based upsert `name` over `rows` (one dataclass each); what it did to each, in the order given."""
        if not rows:
            return []
        made = []
        for row in _in_order(self._batch(name, rows, {"now": now}), len(rows)):
            assert row is not None, f"{name} gave no row for one of its inputs"
            change = row.pop("change")
            made.append(Applied(kind=kind, id=row["id"], change=change, row=from_row(model, row)))
        return made

    def apply_tenant(self, name: str, display_name: str, shadow: bool, now: datetime) -> Applied:
        return self.send_apply_tenant(name, display_name, shadow, now)()

    def send_apply_tenant(self, name: str, display_name: str, shadow: bool, now: datetime) -> Callable[[], Applied]:
        """`apply_tenant`, sent now and read later (see `StoreBase._submit_text`): the simulator sends its tenants together."""
        return self._send_applied(
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

    def apply_workflows(self, workflows: Sequence[WorkflowContent], now: datetime) -> list[Applied]:
        """Upsert workflows, one statement for them all, and say what it did to each, in the order given.

        The one write of a workflow's content (files, the API, the simulator). The
        workflows are distinct (tenant id, name) pairs, inserted in the order given (new ids
        follow it).
        """
        return self._applied_all("workflow", Workflow, "catalog_apply_workflow", workflows, now)

    def apply_schedules(self, schedules: Sequence[ScheduleContent], now: datetime) -> list[Applied]:
        """Upsert schedules, one statement for them all, and say what it did to each, in the order given.

        The one write of a schedule. Of distinct workflows, written in the order given; each
        new or re-activated one fires from its first tick after `now` (`first_fire_after`).
        """
        fired = [replace(s, next_fire_at=first_fire_after(s.cron, s.timezone, now)) for s in schedules]
        return self._applied_all("schedule", Schedule, "catalog_apply_schedule", fired, now)

    def workflow_summaries(self, tenant: str | None = None) -> list[WorkflowSummary]:
        return [from_row(WorkflowSummary, row) for row in self._rows("catalog_workflow_summaries", {"tenant": tenant})]

    def counts(self) -> dict[str, int]:
        row = self._row("catalog_count_rows")
        assert row is not None
        return {key: int(value) for key, value in row.items()}
