"""Workflows and their schedules: list, detail, publish, pause, resume, archive, run now, profile, runs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from tickwarden import catalog, maintenance
from tickwarden.api import convert
from tickwarden.api import schemas as s
from tickwarden.api.deps import NAME_PATTERN, Scope, Scoped
from tickwarden.api.problems import Problem
from tickwarden.profile import PolicyOverrides
from tickwarden.store import Store
from tickwarden.store.api import WorkflowView
from tickwarden.workflow_file import WorkflowDefinition

router = APIRouter(tags=["workflows"], responses=s.PROBLEMS)

TenantName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63, description="Tenant name.")]
WorkflowName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63, description="Workflow name.")]
TenantFilter = Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=63)]
Limit = Annotated[int, Query(ge=1, le=s.MAX_LIMIT)]
Cursor = Annotated[str | None, Query(max_length=512)]
RECENT_OUTCOMES = 20


def find_workflow(scope: Scope, tenant: str, workflow: str) -> WorkflowView:
    """Return a workflow visible to the caller; 404 otherwise (another tenant's workflow does not exist)."""
    with scope.store() as store:
        view = store.api.get_workflow(tenant, workflow)
    if view is None:
        raise Problem(404, "Not found", f"No workflow {tenant}/{workflow}.")
    return view


def _file_windows(store: Store, workflow_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Each workflow's own published maintenance windows, as its entry lists them (operators' are not part of it)."""
    found: dict[int, list[dict[str, Any]]] = {}
    for workflow_id, windows in store.maintenance.for_workflows(workflow_ids).items():
        found[workflow_id] = [maintenance.entry_of(w) for w in windows
                              if w.workflow_id == workflow_id and w.source == "file"]
    return found


def _workflow_out(scope: Scope, view: WorkflowView) -> s.WorkflowOut:
    with scope.store() as store:
        windows = _file_windows(store, [view.workflow.id]).get(view.workflow.id, [])
    return convert.workflow_out(view, scope.clock.now(), windows)


@router.get("/api/workflows", response_model=s.Page[s.WorkflowOut], summary="List workflows")
def list_workflows(scope: Scoped, tenant: TenantFilter = None, limit: Limit = s.DEFAULT_LIMIT,
                   cursor: Cursor = None) -> s.Page[s.WorkflowOut]:
    after = s.decode_cursor(cursor, (str, str))
    with scope.store() as store:
        views = store.api.list_workflows(tenant=scope.visible_tenant(tenant),
                                         after=(after[0], after[1]) if after else None, limit=limit + 1)
    page = views[:limit]
    next_cursor = s.encode_cursor([page[-1].tenant_name, page[-1].workflow.name]) if len(views) > limit else None
    with scope.store() as store:
        windows = _file_windows(store, [v.workflow.id for v in page])
    now = scope.clock.now()
    return s.Page[s.WorkflowOut](items=[convert.workflow_out(v, now, windows.get(v.workflow.id, []))
                                        for v in page], next_cursor=next_cursor)


@router.get("/api/tenants/{tenant}/workflows/{workflow}", response_model=s.WorkflowDetailOut,
            summary="Show a workflow with its schedule, cadence, derived profile and recent outcomes")
def get_workflow(scope: Scoped, tenant: TenantName, workflow: WorkflowName) -> s.WorkflowDetailOut:
    with scope.store() as store:
        view = store.api.get_workflow(tenant, workflow)
        if view is None:
            raise Problem(404, "Not found", f"No workflow {tenant}/{workflow}.")
        recent = store.api.recent_outcomes([view.workflow.id], RECENT_OUTCOMES)[view.workflow.id]
        windows = _file_windows(store, [view.workflow.id]).get(view.workflow.id, [])
    return convert.workflow_detail_out(view, recent, scope.clock.now(), windows)


@router.put("/api/tenants/{tenant}/workflows/{workflow}", response_model=s.WorkflowDetailOut,
            summary="Publish a workflow: create (201) or replace (200) it and its schedule",
            responses={201: {"description": "Created", "model": s.WorkflowDetailOut}})
def publish_workflow(scope: Scoped, tenant: TenantName, workflow: WorkflowName, body: s.WorkflowIn,
                     response: Response) -> s.WorkflowDetailOut:
    """The body is a workflow file's entry; `catalog.publish_workflow` checks and writes it as `apply` does."""
    for key, expected in (("tenant", tenant), ("name", workflow)):
        if getattr(body, key) not in (None, expected):
            raise Problem(422, "Invalid input", f"The body field {key!r} must match the path ({expected!r}) or be left out.")
    with scope.store() as store:  # the caller's view: another tenant, or its workflow, does not exist
        if store.catalog.get_tenant_by_name(tenant) is None:
            raise Problem(404, "Not found", f"No tenant named {tenant!r}.")
        existing = store.api.get_workflow(tenant, workflow)
    if not scope.principal.platform and body.shadow != (existing.workflow.shadow if existing else False):
        raise Problem(403, "Forbidden", "Only a platform token may turn shadow mode on or off.")
    spec = WorkflowDefinition(**{**dict(body), "tenant": tenant, "name": workflow})
    published = catalog.publish_workflow(scope.db, tenant, spec, scope.clock.now(), actor=scope.principal.actor)
    if published.change == "created":
        response.status_code = 201
    with scope.store() as store:
        view = store.api.get_workflow(tenant, workflow)
        assert view is not None
        recent = store.api.recent_outcomes([view.workflow.id], RECENT_OUTCOMES)[view.workflow.id]
        windows = _file_windows(store, [view.workflow.id]).get(view.workflow.id, [])
    return convert.workflow_detail_out(view, recent, scope.clock.now(), windows)


@router.delete("/api/tenants/{tenant}/workflows/{workflow}", status_code=204,
               summary="Archive a workflow: it stops ticking and leaves the lists; applying it again restores it")
def archive_workflow(scope: Scoped, tenant: TenantName, workflow: WorkflowName) -> Response:
    find_workflow(scope, tenant, workflow)
    catalog.archive(scope.db, tenant, workflow, scope.clock.now(), actor=scope.principal.actor)
    return Response(status_code=204)


@router.post("/api/tenants/{tenant}/workflows/{workflow}/pause", response_model=s.WorkflowOut,
             summary="Pause a workflow's schedule")
def pause_workflow(scope: Scoped, tenant: TenantName, workflow: WorkflowName) -> s.WorkflowOut:
    find_workflow(scope, tenant, workflow)
    catalog.pause(scope.db, tenant, workflow, scope.clock.now(), actor=scope.principal.actor)
    return _workflow_out(scope, find_workflow(scope, tenant, workflow))


@router.post("/api/tenants/{tenant}/workflows/{workflow}/resume", response_model=s.WorkflowOut,
             summary="Resume a paused schedule")
def resume_workflow(scope: Scoped, tenant: TenantName, workflow: WorkflowName) -> s.WorkflowOut:
    find_workflow(scope, tenant, workflow)
    catalog.resume(scope.db, tenant, workflow, scope.clock.now())
    return _workflow_out(scope, find_workflow(scope, tenant, workflow))


@router.post("/api/tenants/{tenant}/workflows/{workflow}/archive", response_model=s.WorkflowOut,
             summary="Archive a workflow: no more ticks; its runs and alerts stay readable")
def archive_workflow_and_show(scope: Scoped, tenant: TenantName, workflow: WorkflowName) -> s.WorkflowOut:
    find_workflow(scope, tenant, workflow)
    catalog.archive(scope.db, tenant, workflow, scope.clock.now(), actor=scope.principal.actor)
    return _workflow_out(scope, find_workflow(scope, tenant, workflow))


@router.post("/api/tenants/{tenant}/workflows/{workflow}/run-now", response_model=s.RunOut, status_code=202,
             summary="Queue a manual run")
def run_workflow_now(scope: Scoped, tenant: TenantName, workflow: WorkflowName) -> s.RunOut:
    find_workflow(scope, tenant, workflow)
    run = catalog.run_now(scope.db, tenant, workflow, scope.clock.now(), requested_by=scope.principal.actor)
    return convert.run_out(run, tenant, workflow)


@router.get("/api/tenants/{tenant}/workflows/{workflow}/profile", response_model=s.ProfileOut,
            summary="Show the derived profile with its overrides")
def get_profile(scope: Scoped, tenant: TenantName, workflow: WorkflowName) -> s.ProfileOut:
    view = find_workflow(scope, tenant, workflow)
    derived = convert.derived_profile(view)
    if derived is None:
        raise Problem(409, "Conflict", f"Workflow {tenant}/{workflow} has no schedule, so it has no cadence profile.")
    return s.ProfileOut(**derived.as_dict())


@router.put("/api/tenants/{tenant}/workflows/{workflow}/profile", response_model=s.ProfileOut,
            summary="Replace the profile overrides; omitted fields return to the cadence's default")
def set_profile(scope: Scoped, tenant: TenantName, workflow: WorkflowName, body: PolicyOverrides) -> s.ProfileOut:
    find_workflow(scope, tenant, workflow)
    derived = catalog.set_policy(scope.db, tenant, workflow, body, scope.clock.now(), actor=scope.principal.actor)
    return s.ProfileOut(**derived.as_dict())


@router.get("/api/tenants/{tenant}/workflows/{workflow}/runs", response_model=s.Page[s.RunOut],
            summary="List a workflow's runs (one per tick), newest first")
def list_runs(scope: Scoped, tenant: TenantName, workflow: WorkflowName, limit: Limit = s.DEFAULT_LIMIT,
              cursor: Cursor = None) -> s.Page[s.RunOut]:
    before = s.decode_cursor(cursor, (datetime, int))
    with scope.store() as store:
        view = store.api.get_workflow(tenant, workflow)
        if view is None:
            raise Problem(404, "Not found", f"No workflow {tenant}/{workflow}.")
        runs = store.api.list_runs(view.workflow.id, (before[0], before[1]) if before else None, limit + 1)
    page = runs[:limit]
    next_cursor = s.encode_cursor([page[-1].scheduled_for, page[-1].id]) if len(runs) > limit else None
    return s.Page[s.RunOut](items=[convert.run_out(r, tenant, workflow) for r in page], next_cursor=next_cursor)
