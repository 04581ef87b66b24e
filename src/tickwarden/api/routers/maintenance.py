"""A tenant's maintenance windows: while one covers a workflow, nothing about it is delivered."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from tickwarden import maintenance
from tickwarden.api import schemas as s
from tickwarden.api.deps import NAME_PATTERN, Scoped
from tickwarden.api.problems import Problem
from tickwarden.models import Window

router = APIRouter(tags=["maintenance"], responses=s.PROBLEMS)

TenantName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63, description="Tenant name.")]
WindowId = Annotated[int, Path(ge=1, le=2**63 - 1, description="Maintenance window id.")]


class WindowIn(BaseModel):
    """One-off (`start`, `end`) or recurring (`cron`, `duration`, optional `timezone`)."""

    model_config = ConfigDict(extra="forbid")
    workflow: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=63,
                                 description="The workflow it covers; omitted: every workflow of the tenant.")
    start: datetime | None = Field(default=None, description="One-off: when it starts (with a UTC offset).")
    end: datetime | None = Field(default=None, description="One-off: when it ends (exclusive).")
    cron: str | None = Field(default=None, max_length=200, description="Recurring: when each occurrence starts.")
    duration: StrictInt | str | None = Field(default=None, description="Recurring: seconds, or 30m, 2h, 1d.")
    timezone: str | None = Field(default=None, max_length=64, description="Recurring: the cron's IANA zone (UTC).")
    note: str | None = Field(default=None, max_length=500, description="Why (shown on the dashboard).")


class WindowOut(BaseModel):
    id: int
    tenant: str
    workflow: str | None
    source: str = Field(description="`api` (API, CLI, dashboard) or `file` (the workflow's file).")
    start: datetime | None
    end: datetime | None
    cron: str | None
    timezone: str | None
    duration_seconds: int | None
    note: str | None
    created_by: str
    created_at: datetime
    active_until: datetime | None = Field(description="When the maintenance covering now ends; null: not active.")


def window_out(window: Window, now: datetime, windows: list[Window] | None = None) -> WindowOut:
    active = {w.id: end for w, end in maintenance.active_windows(windows or [window], now)}
    return WindowOut(id=window.id, tenant=window.tenant, workflow=window.workflow, source=window.source,
                     start=window.starts_at, end=window.ends_at, cron=window.cron, timezone=window.timezone,
                     duration_seconds=window.duration_seconds, note=window.note, created_by=window.created_by,
                     created_at=window.created_at, active_until=active.get(window.id))


@router.get("/api/tenants/{tenant}/maintenance", response_model=list[WindowOut],
            summary="List a tenant's maintenance windows")
def list_maintenance_windows(scope: Scoped, tenant: TenantName) -> list[WindowOut]:
    scope.visible_tenant(tenant)
    with scope.store() as store:
        if store.catalog.get_tenant_by_name(tenant) is None:
            raise Problem(404, "Not found", f"No tenant named {tenant!r}.")
        windows = maintenance.list_windows(store, tenant)
    now = scope.clock.now()
    return [window_out(w, now, windows) for w in windows]


@router.post("/api/tenants/{tenant}/maintenance", response_model=WindowOut, status_code=201,
             summary="Add a maintenance window")
def create_maintenance_window(scope: Scoped, tenant: TenantName, body: WindowIn) -> WindowOut:
    scope.visible_tenant(tenant)
    spec = maintenance.window_spec(start=body.start, end=body.end, cron=body.cron, duration=body.duration,
                                   timezone=body.timezone, note=body.note)
    now = scope.clock.now()
    with scope.store() as store:
        window = maintenance.add_window(store, tenant, body.workflow, spec, scope.principal.actor, now)
        windows = maintenance.list_windows(store, tenant)
    return window_out(window, now, windows)


@router.delete("/api/tenants/{tenant}/maintenance/{window_id}", status_code=204,
               summary="Remove a maintenance window")
def delete_maintenance_window(scope: Scoped, tenant: TenantName, window_id: WindowId) -> Response:
    scope.visible_tenant(tenant)
    with scope.store() as store:
        maintenance.remove_window(store, window_id, tenant)
    return Response(status_code=204)
