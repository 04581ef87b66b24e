"""The page behind a message's Acknowledge button: `/ack/<signed token>`, no login.

GET shows what the link would do (the alert, its state) and a confirm button; it
never acts, so a chat client or mail scanner that fetches links cannot acknowledge
anything. POST acknowledges through `alerts.acknowledge`, the path the API, the CLI
and the dashboard take, and records the link's use in the same transaction, so the
link works once. Forged, altered, expired, replayed links and links to alerts that
are resolved or gone each get a page with one sentence saying so, never an error
trace. The pages send `Referrer-Policy: no-referrer` and `Cache-Control: no-store`:
the token must not travel to the next site or stay in a shared cache.
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from tickwarden import ack_links, alerts
from tickwarden.errors import Conflict, NotFound, TickwardenError
from tickwarden.store import Store

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(resources.files("tickwarden").joinpath("templates")))
# no length limit here: an over-long token gets the same one-sentence page as any other bad one
Token = Annotated[str, Path()]
MAX_NAME = 80
HEADERS = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Robots-Tag": "noindex"}


def _page(request: Request, status: int, title: str, message: str, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "dashboard/ack_link.html",
        {"me": None, "now": request.app.state.clock.now(), "title": title, "message": message, "view": None,
         "confirm": False, **context},
        status_code=status, headers=HEADERS)


def _secrets(request: Request) -> tuple[str, tuple[str, ...]]:
    configured = getattr(request.app.state, "link_secret", None)
    return (configured, ()) if configured else ack_links.platform_secrets()


def _check(request: Request, token: str) -> ack_links.AckLink | HTMLResponse:
    """Verify the token and that it was not used; return the link or the refusal page."""
    secret, old = _secrets(request)
    try:
        link = ack_links.verify(token, request.app.state.clock.now(), secret, old)
    except ack_links.LinkRefused as refused:
        return _page(request, refused.status, "Link refused", refused.message)
    with request.app.state.db.transaction() as store:
        used_at = store.ack_links.used_at(link.digest)
    if used_at is not None:
        return _page(request, 409, "Link already used",
                     f"This link already acknowledged its alert on {used_at:%Y-%m-%d %H:%M} UTC; a link works once.")
    return link


@router.get("/ack/{token}")
def confirm(request: Request, token: Token) -> HTMLResponse:
    checked = _check(request, token)
    if isinstance(checked, HTMLResponse):
        return checked
    with request.app.state.db.transaction() as store:
        view = store.monitoring.get_alert(checked.alert_id)
    if view is None:
        return _page(request, 404, "No such alert", "The alert this link names no longer exists.")
    alert = view.alert
    if alert.status != "open":
        return _page(request, 409, "Nothing to acknowledge",
                     f"Alert #{alert.id} is resolved; there is nothing to acknowledge.", view=view)
    if alert.acknowledged_at is not None:
        return _page(request, 200, "Already acknowledged",
                     f"Alert #{alert.id} was acknowledged by {alert.acknowledged_by or 'someone'} on "
                     f"{alert.acknowledged_at:%Y-%m-%d %H:%M} UTC.", view=view)
    return _page(request, 200, "Acknowledge this alert?",
                 "Acknowledging says someone is on it: escalation stops, and the alert stays open until the "
                 "workflow succeeds again.", view=view, confirm=True, max_name=MAX_NAME)


@router.post("/ack/{token}")
def acknowledge(request: Request, token: Token, name: Annotated[str, Form(max_length=MAX_NAME * 4)] = "") -> HTMLResponse:
    checked = _check(request, token)
    if isinstance(checked, HTMLResponse):
        return checked
    link = checked
    clean = " ".join(name.split())[:MAX_NAME]
    actor = f"{clean} (signed link)" if clean else "signed link"
    now = request.app.state.clock.now()

    def record_use(store: Store) -> None:
        if not store.ack_links.record_ack_link_use(link.digest, link.alert_id, now, link.expires_at):
            raise Conflict("This link was used a moment ago; a link works once.")

    try:
        alerts.acknowledge(request.app.state.db, link.alert_id, actor, now, also=record_use)
    except NotFound:
        return _page(request, 404, "No such alert", "The alert this link names no longer exists.")
    except TickwardenError as exc:
        return _page(request, 409, "Not acknowledged", exc.message)
    with request.app.state.db.transaction() as store:
        view = store.monitoring.get_alert(link.alert_id)
    return _page(request, 200, "Acknowledged",
                 f"Alert #{link.alert_id} is acknowledged: escalation stopped, and the alert stays open until "
                 "the workflow succeeds again.", view=view)
