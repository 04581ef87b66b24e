"""Alerts: list and filter, detail with the event history, and the lifecycle by hand.

Reassign, acknowledge, snooze, resolve with a note and add a note all go through the
alert state machine (`tickwarden.alerts`), the same code the CLI and dashboard call.
Internal notes are the platform's: a member token neither writes nor sees them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from tickwarden import alerts
from tickwarden.api import convert
from tickwarden.api import schemas as s
from tickwarden.api.deps import MAX_ID, NAME_PATTERN, Scope, Scoped
from tickwarden.api.problems import Problem

router = APIRouter(tags=["alerts"], responses=s.PROBLEMS)

AlertId = Annotated[int, Path(ge=1, le=MAX_ID, description="Alert id.")]


def _visible(scope: Scope, alert_id: int) -> None:
    """404 unless the caller may see the alert: another tenant's alert does not exist for them."""
    with scope.store() as store:
        if store.api.get_alert(alert_id) is None:
            raise Problem(404, "Not found", f"No alert {alert_id}.")


@router.get("/api/alerts", response_model=s.Page[s.AlertOut], summary="List alerts, newest first")
def list_alerts(
    scope: Scoped,
    status: Literal["open", "resolved"] | None = None,
    severity: Literal["warning", "critical"] | None = None,
    owner: Literal["engineering", "customer"] | None = None,
    tenant: Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=63)] = None,
    workflow: Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=s.MAX_LIMIT)] = s.DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> s.Page[s.AlertOut]:
    before = s.decode_cursor(cursor, (int,))
    with scope.store() as store:
        views = store.api.list_alerts(status=status, severity=severity, owner=owner,
                                      tenant=scope.visible_tenant(tenant), workflow=workflow,
                                      before_id=before[0] if before else None, limit=limit + 1)
    page = views[:limit]
    next_cursor = s.encode_cursor([page[-1].alert.id]) if len(views) > limit else None
    return s.Page[s.AlertOut](items=[convert.alert_out(v) for v in page], next_cursor=next_cursor)


@router.get("/api/alerts/{alert_id}", response_model=s.AlertDetailOut,
            summary="Show an alert with its history and the failing step's sanitized log")
def get_alert(scope: Scoped, alert_id: AlertId) -> s.AlertDetailOut:
    with scope.store() as store:
        view = store.api.get_alert(alert_id)
        if view is None:
            raise Problem(404, "Not found", f"No alert {alert_id}.")
        events = store.api.list_alert_events(alert_id)
        failing = store.api.failing_step(alert_id)
    if not scope.principal.platform:
        events = [e for e in events if not e.internal]
    return convert.alert_detail_out(view, events, failing)


@router.post("/api/alerts/{alert_id}/reassign", response_model=s.AlertOut,
             summary="Hand an open alert to another owner, with a note")
def reassign_alert(scope: Scoped, alert_id: AlertId, body: s.ReassignIn) -> s.AlertOut:
    _visible(scope, alert_id)
    alerts.reassign(scope.db, alert_id, body.owner, body.note, scope.principal.actor, scope.clock.now())
    with scope.store() as store:
        view = store.api.get_alert(alert_id)
    assert view is not None
    return convert.alert_out(view)


@router.post("/api/alerts/{alert_id}/notes", response_model=s.AlertEventOut, status_code=201,
             summary="Add a note to an alert's history")
def add_note(scope: Scoped, alert_id: AlertId, body: s.NoteIn) -> s.AlertEventOut:
    _visible(scope, alert_id)
    if body.internal and not scope.principal.platform:
        raise Problem(403, "Forbidden", "Only platform tokens may write internal notes.")
    event = alerts.add_note(scope.db, alert_id, body.note, scope.principal.actor, scope.clock.now(),
                            internal=body.internal)
    return convert.event_out(event)


def _after(scope: Scope, alert_id: int) -> s.AlertOut:
    with scope.store() as store:
        view = store.api.get_alert(alert_id)
    assert view is not None
    return convert.alert_out(view)


@router.post("/api/alerts/{alert_id}/acknowledge", response_model=s.AlertOut,
             summary="Acknowledge an open alert: escalation stops, it stays open, the thread is told")
def acknowledge_alert(scope: Scoped, alert_id: AlertId, body: s.AcknowledgeIn | None = None) -> s.AlertOut:
    _visible(scope, alert_id)
    alerts.acknowledge(scope.db, alert_id, scope.principal.actor, scope.clock.now(), note=body.note if body else None)
    return _after(scope, alert_id)


@router.post("/api/alerts/{alert_id}/snooze", response_model=s.AlertOut,
             summary="Hold an open alert's escalation for a number of seconds")
def snooze_alert(scope: Scoped, alert_id: AlertId, body: s.SnoozeIn) -> s.AlertOut:
    _visible(scope, alert_id)
    alerts.snooze(scope.db, alert_id, body.seconds, scope.principal.actor, scope.clock.now(), note=body.note)
    return _after(scope, alert_id)


@router.post("/api/alerts/{alert_id}/resolve", response_model=s.AlertOut,
             summary="Resolve an open alert by hand, with a note saying why")
def resolve_alert(scope: Scoped, alert_id: AlertId, body: s.ResolveIn) -> s.AlertOut:
    _visible(scope, alert_id)
    alerts.resolve(scope.db, alert_id, body.note, scope.principal.actor, scope.clock.now())
    return _after(scope, alert_id)
