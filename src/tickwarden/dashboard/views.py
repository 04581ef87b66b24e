"""Dashboard pages: the cross-customer overview, a tenant's workflows, an alert, a run.

Authentication uses the API's tokens: the login form (or `?token=` once) puts the
token in an HttpOnly, SameSite=Strict cookie, so forms posted from another site
never carry it. Every page reads through the same tenant context as the API, so a
member sees only their tenant and the overview is the platform's alone.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from importlib import resources
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from tickwarden import alerts, catalog, maintenance
from tickwarden.api import convert
from tickwarden.api.deps import COOKIE_NAME, MAX_ID, NAME_PATTERN, Scope, authenticate
from tickwarden.clock import isoformat_z
from tickwarden.dashboard.charts import overview_history
from tickwarden.errors import TickwardenError
from tickwarden.messages import attempt_line, format_duration, message_log_tail, tick_facts
from tickwarden.metrics import loop_statuses
from tickwarden.sanitize import redact

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(resources.files("tickwarden").joinpath("templates")))
STRIP_LENGTH = 24
RECENT_ALERTS = 20
MAX_NOTE = 2000
GIVEN_UP_WINDOW = timedelta(days=1)  # notifications given up on stay on the overview this long


def _age(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "—"
    return format_duration(max(0, int((now - value).total_seconds())))


templates.env.filters["utc"] = lambda v: (isoformat_z(v) or "—").replace("T", " ")
templates.env.filters["duration"] = lambda v: "—" if v is None else format_duration(int(v))


def _scope(request: Request) -> Scope | None:
    token = request.cookies.get(COOKIE_NAME)
    db, clock = request.app.state.db, request.app.state.clock
    principal = authenticate(db, token, clock.now())
    return Scope(db=db, clock=clock, principal=principal) if principal else None


def _login_redirect(request: Request) -> RedirectResponse:
    return RedirectResponse("/login?" + urlencode({"next": request.url.path}), status_code=303)


def _safe_next(target: str | None) -> str:
    # Only local paths: never redirect to another site after login.
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/dashboard"
    return target


def _render(request: Request, name: str, scope: Scope | None, status: int = 200, **context: Any) -> HTMLResponse:
    now = request.app.state.clock.now()
    return templates.TemplateResponse(
        request, f"dashboard/{name}", {"me": scope.principal if scope else None, "now": now,
                                       "age": lambda v: _age(v, now), **context},
        status_code=status)


def _not_found(request: Request, scope: Scope, what: str) -> HTMLResponse:
    return _render(request, "message.html", scope, status=404, title="Not found", message=f"No {what}.")


def _with_token(request: Request) -> Response | None:
    """Turn `?token=` into the cookie and redirect to the same page without it."""
    token = request.query_params.get("token")
    if token is None:
        return None
    target = request.url.remove_query_params("token")
    response = RedirectResponse(str(target.path) + (f"?{target.query}" if target.query else ""), status_code=303)
    db, clock = request.app.state.db, request.app.state.clock
    if authenticate(db, token, clock.now()) is not None:
        _set_cookie(request, response, token)
    return response


def _set_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(COOKIE_NAME, token, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", max_age=30 * 86400, path="/")


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/dashboard", status_code=303)


@router.get("/login")
def login_form(request: Request, next: Annotated[str | None, Query(max_length=500)] = None) -> HTMLResponse:
    return _render(request, "login.html", None, next=_safe_next(next), error=None)


@router.post("/login")
def login(request: Request, token: Annotated[str, Form(max_length=200)] = "",
          next: Annotated[str, Form(max_length=500)] = "/dashboard") -> Response:
    db, clock = request.app.state.db, request.app.state.clock
    if authenticate(db, token.strip(), clock.now()) is None:
        return _render(request, "login.html", None, status=401, next=_safe_next(next),
                       error="That token is unknown or revoked.")
    response = RedirectResponse(_safe_next(next), status_code=303)
    _set_cookie(request, response, token.strip())
    return response


@router.post("/logout")
def logout() -> RedirectResponse:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE_NAME, path="/")
    return response


def _overview_context(scope: Scope) -> dict[str, Any]:
    now = scope.clock.now()
    with scope.store() as store:
        tenants = store.api.overview_tenants()
        open_alerts = store.api.open_alerts()
        heartbeats = store.api.loop_heartbeats()
        # Loops that run while their notifications go nowhere look healthy: show the backlog.
        undelivered = store.api.undelivered_notifications(now - GIVEN_UP_WINDOW)
    loops = loop_statuses(heartbeats, now)
    return {**overview_history(scope), "tenants": tenants, "open_alerts": open_alerts, "loops": loops,
            "stalled": [loop for loop in loops if loop.stalled], "undelivered": undelivered,
            "failing_channels": [c for c in undelivered if c.failing]}


@router.get("/dashboard")
def overview(request: Request) -> Response:
    if (redirect := _with_token(request)) is not None:
        return redirect
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    if not scope.principal.platform:
        return RedirectResponse(f"/dashboard/tenants/{scope.principal.tenant_name}", status_code=303)
    return _render(request, "overview.html", scope, **_overview_context(scope))


@router.get("/dashboard/partials/overview")
def overview_live(request: Request) -> Response:
    scope = _scope(request)
    if scope is None or not scope.principal.platform:
        return Response(status_code=401)
    return _render(request, "_overview_live.html", scope, **_overview_context(scope))


def _tenant_context(scope: Scope, tenant: str) -> dict[str, Any] | None:
    with scope.store() as store:
        found = store.catalog.get_tenant_by_name(tenant)
        if found is None:
            return None
        views = store.api.list_workflows(tenant=tenant, after=None, limit=500)
        strips = store.api.recent_outcomes([v.workflow.id for v in views], STRIP_LENGTH)
        open_alerts = store.api.list_alerts(status="open", tenant=tenant, limit=200)
        recent_alerts = store.api.list_alerts(tenant=tenant, limit=RECENT_ALERTS)
        windows = maintenance.list_windows(store, tenant)
        checkin_issued = store.dashboard.checkin_issued([v.workflow.id for v in views if v.workflow.kind == "external"])
    active = {w.id: end for w, end in maintenance.active_windows(windows, scope.clock.now())}
    rows = [{"view": v, "profile": convert.derived_profile(v), "strip": list(reversed(strips[v.workflow.id]))}
            for v in views]
    alert_by_workflow = {a.alert.workflow_id: a for a in open_alerts}
    return {"tenant": found, "rows": rows, "alert_by_workflow": alert_by_workflow, "recent_alerts": recent_alerts,
            "windows": windows, "active_windows": active, "checkin_issued": checkin_issued}


@router.get("/dashboard/tenants/{tenant}")
def tenant_page(request: Request, tenant: Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]) -> Response:
    if (redirect := _with_token(request)) is not None:
        return redirect
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    context = _tenant_context(scope, tenant)
    if context is None:
        return _not_found(request, scope, f"tenant {tenant!r}")
    return _render(request, "tenant.html", scope, error=None, **context)


@router.get("/dashboard/partials/tenants/{tenant}")
def tenant_live(request: Request, tenant: Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]) -> Response:
    scope = _scope(request)
    if scope is None:
        return Response(status_code=401)
    context = _tenant_context(scope, tenant)
    if context is None:
        return Response(status_code=404)
    return _render(request, "_tenant_live.html", scope, **context)


def _alert_context(scope: Scope, alert_id: int) -> dict[str, Any] | None:
    with scope.store() as store:
        view = store.api.get_alert(alert_id)
        if view is None:
            return None
        events = store.api.list_alert_events(alert_id)
        failing = store.api.failing_step(alert_id)
        windows = store.maintenance.for_workflows([view.alert.workflow_id]).get(view.alert.workflow_id, [])
        # The same facts, from the same query and builder, as every message about this alert.
        facts = tick_facts(store.alert_content.tick_facts([alert_id]).get(alert_id))
    # the maintenance covering the alert's workflow now: nothing about it is delivered until it ends
    maintenance_now = maintenance.active_windows(windows, scope.clock.now())
    if failing is not None:  # redacted again on the way out, as every message's log is
        failing = dataclasses.replace(failing, log=redact(failing.log))
    if not scope.principal.platform:  # internal notes are the platform team's
        events = [e for e in events if not e.internal]
    return {"view": view, "alert": view.alert, "events": events, "failing": failing,
            "platform": scope.principal.platform, "facts": facts, "facts_attempt": attempt_line(facts),
            "facts_log": message_log_tail(facts.log_tail),
            "maintenance_now": maintenance_now}


@router.get("/dashboard/alerts/{alert_id}")
def alert_page(request: Request, alert_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> Response:
    if (redirect := _with_token(request)) is not None:
        return redirect
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    context = _alert_context(scope, alert_id)
    if context is None:
        return _not_found(request, scope, f"alert {alert_id}")
    return _render(request, "alert.html", scope, error=None, **context)


def _alert_action(request: Request, alert_id: int, action: str, owner: str, note: str) -> Response:
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    context = _alert_context(scope, alert_id)
    if context is None:
        return _not_found(request, scope, f"alert {alert_id}")
    error = None
    if "\x00" in note or len(note) > MAX_NOTE:
        error = f"A note is at most {MAX_NOTE} characters of text."
    elif action == "reassign" and owner not in ("engineering", "customer"):
        error = "Choose engineering or customer as the new owner."
    elif action in ("note", "internal-note") and not note.strip():
        error = "The note is empty."
    elif action == "resolve" and not note.strip():
        error = "Say why you resolve it by hand."
    elif action == "internal-note" and not scope.principal.platform:
        error = "Only the platform team may write internal notes."
    if error is None:
        try:
            now = scope.clock.now()
            actor = scope.principal.actor
            if action == "reassign":
                alerts.reassign(scope.db, alert_id, owner, note.strip() or None, actor, now)
            elif action == "acknowledge":
                alerts.acknowledge(scope.db, alert_id, actor, now, note=note.strip() or None)
            elif action == "resolve":
                alerts.resolve(scope.db, alert_id, note, actor, now)
            else:
                alerts.add_note(scope.db, alert_id, note, actor, now, internal=action == "internal-note")
        except TickwardenError as exc:
            error = exc.message
    if error is not None:
        return _render(request, "alert.html", scope, status=400, error=error, **_alert_context(scope, alert_id))
    return RedirectResponse(f"/dashboard/alerts/{alert_id}", status_code=303)


@router.post("/dashboard/alerts/{alert_id}/reassign")
def reassign_form(request: Request, alert_id: Annotated[int, Path(ge=1, le=MAX_ID)],
                  owner: Annotated[str, Form(max_length=20)] = "",
                  note: Annotated[str, Form(max_length=MAX_NOTE * 2)] = "") -> Response:
    return _alert_action(request, alert_id, "reassign", owner, note)


@router.post("/dashboard/alerts/{alert_id}/notes")
def note_form(request: Request, alert_id: Annotated[int, Path(ge=1, le=MAX_ID)],
              note: Annotated[str, Form(max_length=MAX_NOTE * 2)] = "",
              internal: Annotated[str, Form(max_length=10)] = "") -> Response:
    return _alert_action(request, alert_id, "internal-note" if internal else "note", "", note)


@router.post("/dashboard/alerts/{alert_id}/acknowledge")
def acknowledge_form(request: Request, alert_id: Annotated[int, Path(ge=1, le=MAX_ID)],
                     note: Annotated[str, Form(max_length=MAX_NOTE * 2)] = "") -> Response:
    return _alert_action(request, alert_id, "acknowledge", "", note)


@router.post("/dashboard/alerts/{alert_id}/resolve")
def resolve_form(request: Request, alert_id: Annotated[int, Path(ge=1, le=MAX_ID)],
                 note: Annotated[str, Form(max_length=MAX_NOTE * 2)] = "") -> Response:
    return _alert_action(request, alert_id, "resolve", "", note)


@router.get("/dashboard/runs/{run_id}")
def run_page(request: Request, run_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> Response:
    if (redirect := _with_token(request)) is not None:
        return redirect
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    with scope.store() as store:
        view = store.api.get_run(run_id)
        if view is None:
            return _not_found(request, scope, f"run {run_id}")
        attempts = store.ledger.list_attempts(run_id, view.run.scheduled_for)
        steps = store.api.list_run_steps(run_id, view.run.scheduled_for)
    detail = convert.run_detail_out(view.run, view.tenant_name, view.workflow_name, attempts, steps)
    return _render(request, "run.html", scope, run=detail)


@router.get("/dashboard/partials/runs/{run_id}")
def run_live(request: Request, run_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> Response:
    """The run page's live part, polled while the run is in progress."""
    scope = _scope(request)
    if scope is None:
        return Response(status_code=401)
    with scope.store() as store:
        view = store.api.get_run(run_id)
        if view is None:
            return Response(status_code=404)
        attempts = store.ledger.list_attempts(run_id, view.run.scheduled_for)
        steps = store.api.list_run_steps(run_id, view.run.scheduled_for)
    detail = convert.run_detail_out(view.run, view.tenant_name, view.workflow_name, attempts, steps)
    return _render(request, "_run_live.html", scope, run=detail)


@router.post("/dashboard/runs/{run_id}/cancel")
def cancel_form(request: Request, run_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> Response:
    """The dashboard's cancel button: the same `catalog.cancel` as the CLI and the API."""
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    with scope.store() as store:
        view = store.api.get_run(run_id)  # another tenant's run is not found, as for reading it
    if view is None:
        return _not_found(request, scope, f"run {run_id}")
    try:
        catalog.cancel(scope.db, run_id, scope.clock.now(), scope.principal.actor)
    except TickwardenError as exc:
        with scope.store() as store:
            attempts = store.ledger.list_attempts(run_id)
            steps = store.api.list_run_steps(run_id)
            view = store.api.get_run(run_id) or view
        detail = convert.run_detail_out(view.run, view.tenant_name, view.workflow_name, attempts, steps)
        return _render(request, "run.html", scope, status=409, error=exc.message, run=detail)
    return RedirectResponse(f"/dashboard/runs/{run_id}", status_code=303)


@router.post("/dashboard/tenants/{tenant}/maintenance")
def maintenance_form(
    request: Request,
    tenant: Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)],
    workflow: Annotated[str, Form(max_length=63)] = "",
    start: Annotated[str, Form(max_length=64)] = "",
    end: Annotated[str, Form(max_length=64)] = "",
    cron: Annotated[str, Form(max_length=200)] = "",
    duration: Annotated[str, Form(max_length=40)] = "",
    timezone: Annotated[str, Form(max_length=64)] = "",
    note: Annotated[str, Form(max_length=500)] = "",
) -> Response:
    """The tenant page's form: the same `maintenance.add_window` as the CLI and the API."""
    scope = _scope(request)
    if scope is None:
        return _login_redirect(request)
    context = _tenant_context(scope, tenant)
    if context is None:  # another tenant's page is not found, as for reading it
        return _not_found(request, scope, f"tenant {tenant!r}")
    try:
        spec = maintenance.window_spec(start=start.strip() or None, end=end.strip() or None,
                                       cron=cron.strip() or None, duration=duration.strip() or None,
                                       timezone=timezone.strip() or None, note=note.strip() or None)
        with scope.store() as store:
            maintenance.add_window(store, tenant, workflow.strip() or None, spec, scope.principal.actor,
                                   scope.clock.now())
    except TickwardenError as exc:
        return _render(request, "tenant.html", scope, status=400, error=exc.message, **context)
    return RedirectResponse(f"/dashboard/tenants/{tenant}", status_code=303)

