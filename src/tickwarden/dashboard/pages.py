"""Dashboard pages with time in them: a workflow's page and the runs list (the overview's charts: charts.py).

Invariants:
- Every read is bounded by a time window (`since`, `until`) and a row limit, so a page
  costs what its window holds, never a scan of the whole ledger.
- Every read runs in the caller's tenant context: a member never sees another tenant's
  workflow or runs; naming them answers 404, exactly as for an unknown name.
- Pause, resume, run-now and cancel go through `catalog` — the same functions the CLI,
  the API and scenarios call — so the dashboard has no second implementation of them.
- A workflow's kind is shown wherever the workflow is. An external workflow's ping key is
  never shown on a page that lists or describes it (only its hash is stored, so it could
  not be): only whether and when a check-in URL was issued. Issuing or rotating one is an
  operator's action (`checkins.issue_key`, as `tickwarden checkin-url`), and its answer,
  sent once with `Cache-Control: no-store`, is the one page that holds the key.
- Times are rendered as `<time datetime=…>` in UTC; static/dashboard.js turns them into
  relative and local text, keeping the UTC time in the title. The "now" they are relative
  to is the server's clock (`data-now`), so a simulated clock reads correctly.
- Bad filter input is answered with one sentence and status 400, never a traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from cron_descriptor import ExpressionDescriptor, Options  # type: ignore[import-untyped]  # no py.typed
from fastapi import Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup, escape

from tickwarden import catalog, checkins
from tickwarden.api import convert
from tickwarden.api.deps import NAME_PATTERN, Principal, Scope
from tickwarden.clock import isoformat_z
from tickwarden.dashboard.charts import epoch as _epoch
from tickwarden.dashboard.views import _login_redirect, _not_found, _render, _scope, _with_token, router, templates
from tickwarden.errors import TickwardenError
from tickwarden.messages import format_duration
from tickwarden.store.api import WorkflowView
from tickwarden.store.dashboard import RunPoint

# The windows a page may show, by the name used in its query string.
WINDOWS: dict[str, timedelta] = {
    "1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(days=1),
    "7d": timedelta(days=7), "30d": timedelta(days=30), "90d": timedelta(days=90),
}
RUN_STATUSES = ("queued", "running", "pending_retry", "succeeded", "failed", "missed", "cancelled")
MAX_TIMELINE_RUNS = 2000   # a window holding more shows its newest runs only, and says so
MAX_LIST_RUNS = 200
TICKS_ON_AXIS = 6
ACTIONS = ("pause", "resume", "run-now")

TenantName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
WorkflowName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
WindowParam = Annotated[str | None, Query(max_length=10)]


class BadFilter(Exception):
    """A filter the page cannot apply; its message is the one sentence shown."""


def when(value: datetime | None, style: str = "relative") -> Markup:
    """A `<time>` element: UTC text and title, turned relative or local by static/dashboard.js."""
    if value is None:
        return Markup("—")
    iso = isoformat_z(value) or ""
    utc = escape((isoformat_z(value.replace(microsecond=0)) or "").replace("T", " ").replace("Z", " UTC"))
    return Markup(f'<time datetime="{escape(iso)}" data-style="{escape(style)}" title="{utc}">{utc}</time>')


templates.env.filters["when"] = when


def describe_cron(cron: str | None) -> str:
    """The schedule in words ("At 02:00, Monday through Friday"); the expression itself if it cannot be put so."""
    if not cron:
        return "no schedule"
    options = Options()
    options.use_24hour_time_format = True
    try:
        return str(ExpressionDescriptor(cron, options).get_description())
    except Exception:  # the expression was validated on publish; words are a courtesy
        return cron


def can_operate(principal: Principal, tenant: str) -> bool:
    """Who may pause, resume, run or cancel: the platform, and members of the workflow's own tenant."""
    return principal.platform or principal.tenant_name == tenant


def default_window(cadence_seconds: int | None) -> str:
    """About a hundred ticks of a workflow, from 6 hours (a minutely job) to 90 days (a daily one)."""
    if not cadence_seconds:
        return "7d"
    wanted = timedelta(seconds=cadence_seconds * 100)
    for name, span in WINDOWS.items():
        if span >= wanted and span >= WINDOWS["6h"]:
            return name
    return "90d"


def parse_window(value: str | None, default: str) -> tuple[str, timedelta]:
    name = default if value in (None, "") else value
    if name not in WINDOWS:
        raise BadFilter(f"Choose a time window among {', '.join(WINDOWS)}; {str(value)[:20]!r} is not one.")
    return name, WINDOWS[name]


@dataclass(frozen=True)
class Cell:
    """One run placed on the timeline: `left` is its position in percent of the window."""

    run: RunPoint
    left: float
    css: str


def _timeline(runs: list[RunPoint], since: datetime, span: timedelta) -> tuple[list[Cell], list[tuple[float, datetime]]]:
    total = span.total_seconds()
    cells = []
    for r in runs:
        left = min(100.0, max(0.0, (r.scheduled_for - since).total_seconds() / total * 100))
        cells.append(Cell(run=r, left=round(left, 3), css="recovered" if r.recovered else r.status))
    ticks = [(round(i * 100 / TICKS_ON_AXIS, 3), since + span * i / TICKS_ON_AXIS) for i in range(TICKS_ON_AXIS + 1)]
    return cells, ticks


def _duration_chart(runs: list[RunPoint]) -> dict[str, Any] | None:
    finished = [r for r in reversed(runs) if r.duration_seconds is not None]
    if not finished:
        return None
    return {"kind": "points", "x": [_epoch(r.scheduled_for) for r in finished],
            "series": [{"label": "duration (s)", "values": [r.duration_seconds for r in finished],
                        "color": "#175cd3"}],
            "links": [f"/dashboard/runs/{r.id}" for r in finished]}


def _workflow_context(scope: Scope, tenant: str, workflow: str, window: str | None) -> dict[str, Any] | None:
    now = scope.clock.now()
    with scope.store() as store:
        view = store.api.get_workflow(tenant, workflow)
        if view is None:
            return None
        window_name, span = parse_window(window, default_window(view.cadence_seconds))
        since = now - span
        runs = store.dashboard.workflow_runs(view.workflow.id, since, now + timedelta(seconds=1), MAX_TIMELINE_RUNS)
        last_success = store.dashboard.last_success(view.workflow.id)
        open_alerts = store.api.list_alerts(status="open", tenant=tenant, workflow=workflow, limit=1)
        external = view.workflow.kind == checkins.EXTERNAL
        checkin_issued = store.checkins.key_issued_at(view.workflow.id) if external else None
    cells, ticks = _timeline(runs, since, span)
    return {
        "view": view, "wf": view.workflow, "tenant_name": view.tenant_name, "window": window_name,
        "windows": list(WINDOWS), "since": since, "runs": runs, "cells": cells, "ticks": ticks,
        "truncated": len(runs) >= MAX_TIMELINE_RUNS, "durations": _duration_chart(runs),
        "in_progress": [r for r in runs if r.in_progress], "last_success": last_success,
        "open_alert": open_alerts[0] if open_alerts else None, "profile": convert.derived_profile(view),
        "schedule_words": describe_cron(view.cron), "next_fire": convert.next_fire_at(view, now),
        "can_operate": can_operate(scope.principal, view.tenant_name), "error": None,
        "external": external, "checkin_issued": checkin_issued,
    }


def _bad_filter(request: Request, scope: Scope, exc: BadFilter) -> HTMLResponse:
    return _render(request, "message.html", scope, status=400, title="Bad filter", message=str(exc))


@router.get("/dashboard/tenants/{tenant}/workflows/{workflow}")
def workflow_page(request: Request, tenant: TenantName, workflow: WorkflowName,
                  window: WindowParam = None) -> Response:
    if (redirect := _with_token(request)) is not None:
        return redirect
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    try:
        context = _workflow_context(scope, tenant, workflow, window)
    except BadFilter as exc:
        return _bad_filter(request, scope, exc)
    if context is None:
        return _not_found(request, scope, f"workflow {tenant}/{workflow}")
    return _render(request, "workflow.html", scope, **context)


@router.get("/dashboard/partials/tenants/{tenant}/workflows/{workflow}")
def workflow_live(request: Request, tenant: TenantName, workflow: WorkflowName, window: WindowParam = None) -> Response:
    scope = _scope(request)
    if scope is None:
        return Response(status_code=401)
    try:
        context = _workflow_context(scope, tenant, workflow, window)
    except BadFilter as exc:
        return Response(str(exc), status_code=400, media_type="text/plain")
    if context is None:
        return Response(status_code=404)
    return _render(request, "_workflow_live.html", scope, **context)


@router.post("/dashboard/tenants/{tenant}/workflows/{workflow}/checkin-url")
def checkin_url_action(request: Request, tenant: TenantName, workflow: WorkflowName,
                       rotate: Annotated[bool, Form()] = False) -> Response:
    """Issue (or rotate) an external workflow's check-in URL and show it this once, as `tickwarden checkin-url`."""
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    with scope.store() as store:
        view = store.api.get_workflow(tenant, workflow)  # another tenant's workflow is not found
    if view is None:
        return _not_found(request, scope, f"workflow {tenant}/{workflow}")
    if not can_operate(scope.principal, view.tenant_name):
        return _render(request, "message.html", scope, status=403, title="Not allowed",
                       message=f"Only the platform team or members of {tenant} may issue this workflow's check-in URL.")
    try:
        issued = checkins.issue_key(scope.db, view.tenant_name, view.workflow.name, scope.clock.now(), rotate=rotate)
    except TickwardenError as exc:
        context = _workflow_context(scope, tenant, workflow, None)
        if context is None:
            return _not_found(request, scope, f"workflow {tenant}/{workflow}")
        context["error"] = exc.message
        return _render(request, "workflow.html", scope, status=409, **context)
    url = str(request.base_url).rstrip("/") + issued.path
    response = _render(request, "checkin_url.html", scope, view=view, url=url, issued=issued)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/dashboard/tenants/{tenant}/workflows/{workflow}/{action}")
def workflow_action(request: Request, tenant: TenantName, workflow: WorkflowName,
                    action: Annotated[str, Path(pattern="^(pause|resume|run-now)$")]) -> Response:
    """The workflow page's buttons: `catalog.pause`, `catalog.resume`, `catalog.run_now`, as the CLI and API."""
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    with scope.store() as store:
        view = store.api.get_workflow(tenant, workflow)  # another tenant's workflow is not found
    if view is None:
        return _not_found(request, scope, f"workflow {tenant}/{workflow}")
    if not can_operate(scope.principal, view.tenant_name):
        return _render(request, "message.html", scope, status=403, title="Not allowed",
                       message=f"Only the platform team or members of {tenant} may {action} this workflow.")
    now, actor = scope.clock.now(), scope.principal.actor
    try:
        if action == "pause":
            catalog.pause(scope.db, tenant, workflow, now, actor=actor)
        elif action == "resume":
            catalog.resume(scope.db, tenant, workflow, now)
        else:
            catalog.run_now(scope.db, tenant, workflow, now, requested_by=actor)
    except TickwardenError as exc:
        context = _workflow_context(scope, tenant, workflow, None)
        if context is None:
            return _not_found(request, scope, f"workflow {tenant}/{workflow}")
        context["error"] = exc.message
        return _render(request, "workflow.html", scope, status=409, **context)
    return RedirectResponse(workflow_url(view), status_code=303)


def workflow_url(view: WorkflowView) -> str:
    return f"/dashboard/tenants/{view.tenant_name}/workflows/{view.workflow.name}"


# -- the runs list ------------------------------------------------------------------


def _runs_context(scope: Scope, status: str | None, tenant: str | None, window: str | None) -> dict[str, Any] | None:
    """The runs list's rows; None when the tenant filter names a tenant the caller cannot see."""
    status = status or None
    tenant = tenant or None
    if status is not None and status not in RUN_STATUSES:
        raise BadFilter(f"Choose a status among {', '.join(RUN_STATUSES)}; {status[:20]!r} is not one.")
    if tenant is not None and not re.match(NAME_PATTERN, tenant):
        raise BadFilter(f"{tenant[:70]!r} is not a tenant name.")
    window_name, span = parse_window(window, "24h")
    now = scope.clock.now()
    with scope.store() as store:
        if tenant is not None and store.catalog.get_tenant_by_name(tenant) is None:
            return None
        runs = store.dashboard.runs(since=now - span, until=now + timedelta(seconds=1), tenant=tenant, status=status,
                               limit=MAX_LIST_RUNS)
        tenants = [t.name for t in store.api.list_tenants(after=None, limit=500)]
    query = {k: v for k, v in (("status", status), ("tenant", tenant), ("window", window_name)) if v}
    return {"runs": runs, "status_filter": status, "tenant": tenant, "window": window_name, "windows": list(WINDOWS),
            "statuses": RUN_STATUSES, "tenants": tenants, "query": urlencode(query),
            "truncated": len(runs) >= MAX_LIST_RUNS, "limit": MAX_LIST_RUNS}


Filter = Annotated[str | None, Query(max_length=100)]


@router.get("/dashboard/runs")
def runs_page(request: Request, status: Filter = None, tenant: Filter = None, window: WindowParam = None) -> Response:
    if (redirect := _with_token(request)) is not None:
        return redirect
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    try:
        context = _runs_context(scope, status, tenant, window)
    except BadFilter as exc:
        return _bad_filter(request, scope, exc)
    if context is None:
        return _not_found(request, scope, f"tenant {tenant!r}")
    return _render(request, "runs.html", scope, **context)


@router.get("/dashboard/partials/runs")
def runs_live(request: Request, status: Filter = None, tenant: Filter = None, window: WindowParam = None) -> Response:
    scope = _scope(request)
    if scope is None:
        return Response(status_code=401)
    try:
        context = _runs_context(scope, status, tenant, window)
    except BadFilter as exc:
        return Response(str(exc), status_code=400, media_type="text/plain")
    if context is None:
        return Response(status_code=404)
    return _render(request, "_runs_live.html", scope, **context)


def duration_text(seconds: float | None) -> str:
    return "—" if seconds is None else format_duration(int(seconds))


templates.env.filters["seconds"] = duration_text
