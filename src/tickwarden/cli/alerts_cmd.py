"""`tickwarden alerts`: list alerts, show one with its history, reassign it, add a note."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json, print_table, status
from tickwarden.clock import WallClock, isoformat_z
from tickwarden.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from tickwarden.db import Database
    from tickwarden.models import AlertEvent, AlertView

alerts_app = typer.Typer(
    help="Alerts: one per broken workflow, with an owner, a history and a downtime.",
    invoke_without_command=True,
)
app.add_typer(alerts_app, name="alerts")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _db() -> Database:
    from tickwarden.db import Database

    return Database(min_size=1, max_size=2)


def _actor(actor: str | None) -> str:
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def _alert_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"Alert id {text!r} is not a number.") from None
    if value < 1:
        raise InvalidInput(f"Alert id {text!r} is not valid: ids start at 1.")
    return value


def downtime(seconds: int | None) -> str:
    """Return a duration as `2d 03h 04m`, `3h 04m`, `4m 05s` or `5s`."""
    if seconds is None:
        return ""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h {minutes:02d}m"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def alert_dict(view: AlertView) -> dict[str, Any]:
    a = view.alert
    return {
        "id": a.id,
        "tenant": view.tenant_name,
        "workflow": view.workflow_name,
        "status": a.status,
        "first_severity": a.first_severity,
        "severity": a.severity,
        "owner": a.owner,
        "reason": a.reason,
        "failure_count": a.failure_count,
        "first_failure_at": isoformat_z(a.first_failure_at),
        "last_failure_at": isoformat_z(a.last_failure_at),
        "last_error_category": a.last_error_category,
        "last_error": a.last_error,
        "failed_step": a.failed_step,
        "shadow": a.shadow,
        "cadence_seconds": a.cadence_seconds,
        "escalate_at": isoformat_z(a.escalate_at),
        "opened_at": isoformat_z(a.opened_at),
        "escalated_at": isoformat_z(a.escalated_at),
        "resolved_at": isoformat_z(a.resolved_at),
        "resolved_by_run_id": a.resolved_by_run_id,
        "downtime_seconds": a.downtime_seconds,
        "acknowledged_at": isoformat_z(a.acknowledged_at),
        "acknowledged_by": a.acknowledged_by,
        "snoozed_until": isoformat_z(a.snoozed_until),
    }


def event_dict(event: AlertEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "kind": event.kind,
        "at": isoformat_z(event.at),
        "severity": event.severity,
        "owner": event.owner,
        "actor": event.actor,
        "note": event.note,
        "internal": event.internal,
        "data": event.data,
    }


@alerts_app.callback()
def list_command(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's alerts.")] = None,
    open_only: Annotated[bool, typer.Option("--open", help="Only open alerts.")] = False,
    limit: Annotated[int, typer.Option("--limit", help="At most this many, newest first.")] = 200,
    as_json: JsonOption = False,
) -> None:
    """List alerts, newest first (or run one of the commands below)."""
    if ctx.invoked_subcommand is not None:
        return
    if limit < 1:
        raise InvalidInput("--limit must be at least 1.")
    with _db() as db:
        with db.transaction() as store:
            if tenant is not None and store.catalog.get_tenant_by_name(tenant) is None:
                raise NotFound(f"There is no tenant {tenant!r}.")
            views = store.monitoring.list_alerts(tenant=tenant, open_only=open_only, limit=limit)
    rows = [alert_dict(v) for v in views]
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no alerts" + (" open" if open_only else ""))
        return
    print_table(
        ("id", "tenant", "workflow", "status", "first", "severity", "owner", "failures", "opened", "escalated",
         "resolved", "downtime"),
        [(str(r["id"]), r["tenant"], r["workflow"], status(r["status"] + (" (shadow)" if r["shadow"] else "")),
          r["first_severity"], status(r["severity"]), r["owner"], str(r["failure_count"]), r["opened_at"],
          r["escalated_at"], r["resolved_at"], downtime(r["downtime_seconds"])) for r in rows],
        title="alerts", no_wrap=("id", "status"),
    )


@alerts_app.command("show")
def show_command(alert: Annotated[str, typer.Argument(help="Alert id.")], as_json: JsonOption = False) -> None:
    """Show one alert and its history (opened, failures, escalation, handoffs, notes, resolution)."""
    alert_id = _alert_id(alert)
    with _db() as db:
        with db.transaction() as store:
            view = store.monitoring.get_alert(alert_id)
            if view is None:
                raise NotFound(f"There is no alert {alert_id}.")
            events = store.monitoring.list_alert_events(alert_id)
    data = {**alert_dict(view), "events": [event_dict(e) for e in events]}
    if as_json:
        print_json(data)
        return
    fields = [(key.replace("_", " "), status(str(data[key])) if key in ("status", "severity") else str(data[key]))
              for key in ("status", "first_severity", "severity", "owner", "failure_count", "first_failure_at",
                          "last_failure_at", "last_error_category", "last_error", "failed_step", "opened_at",
                          "escalate_at", "escalated_at", "resolved_at", "resolved_by_run_id", "acknowledged_at",
                          "acknowledged_by", "snoozed_until")
              if data[key] is not None]
    if data["downtime_seconds"] is not None:
        fields.append(("downtime", downtime(data["downtime_seconds"])))
    if data["shadow"]:
        fields.append(("shadow", "yes: delivered to shadow channels only"))
    print_table(("field", "value"), fields, title=f"alert {alert_id}: {view.tenant_name}/{view.workflow_name}")
    history = []
    for e in data["events"]:
        detail = e["note"] or ""
        if e["kind"] == "reassigned":
            detail = f"{e['data'].get('from')} → {e['data'].get('to')}" + (f": {detail}" if detail else "")
        elif e["kind"] in ("failed", "opened"):
            detail = f"failure {e['data'].get('failure_count')}"
        elif e["kind"] == "escalated":
            detail = f"by {e['data'].get('reason')}"
        elif e["kind"] == "resolved":
            detail = f"run {e['data'].get('run_id')}, down {downtime(e['data'].get('downtime_seconds'))}"
        if e["internal"]:
            detail = f"(internal) {detail}"
        history.append((e["at"], e["kind"], e["severity"], e["owner"], e["actor"], detail))
    print_table(("at", "event", "severity", "owner", "by", "note"), history, title="history")


@alerts_app.command("reassign")
def reassign_command(
    alert: Annotated[str, typer.Argument(help="Alert id.")],
    owner: Annotated[str, typer.Option("--owner", help="engineering or customer.")],
    note: Annotated[str | None, typer.Option("--note", help="Why, for whoever picks it up.")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="Who is reassigning (default: your user name).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Hand an open alert to engineering or the customer; the owner then stays put."""
    from tickwarden import alerts

    alert_id = _alert_id(alert)
    with _db() as db:
        updated = alerts.reassign(db, alert_id, owner, note, _actor(actor), WallClock().now())
    if as_json:
        print_json({"id": updated.id, "owner": updated.owner})
    else:
        console.print(f"alert {updated.id} is now owned by {updated.owner}")


@alerts_app.command("note")
def note_command(
    alert: Annotated[str, typer.Argument(help="Alert id.")],
    text: Annotated[str, typer.Argument(help="The note.")],
    internal: Annotated[bool, typer.Option("--internal", help="For the platform team only: never sent to the "
                                                                  "tenant's channels.")] = False,
    actor: Annotated[str | None, typer.Option("--actor", help="Who is writing (default: your user name).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Add a note to an alert's history and thread (customer-visible unless --internal)."""
    from tickwarden import alerts

    alert_id = _alert_id(alert)
    with _db() as db:
        event = alerts.add_note(db, alert_id, text, _actor(actor), WallClock().now(), internal=internal)
    if as_json:
        print_json(event_dict(event))
    else:
        console.print(f"{'internal note' if internal else 'noted'} on alert {alert_id}")


NoteOption = Annotated[str | None, typer.Option("--note", help="A note for the thread.")]
ActorOption = Annotated[str | None, typer.Option("--actor", help="Who is acting (default: your user name).")]


@alerts_app.command("ack")
def ack_command(alert: Annotated[str, typer.Argument(help="Alert id.")], note: NoteOption = None,
                actor: ActorOption = None, as_json: JsonOption = False) -> None:
    """Acknowledge an open alert: escalation stops, it stays open, the thread is told."""
    from tickwarden import alerts

    alert_id = _alert_id(alert)
    with _db() as db:
        event = alerts.acknowledge(db, alert_id, _actor(actor), WallClock().now(), note=note)
    if as_json:
        print_json(event_dict(event))
    else:
        console.print(f"alert {alert_id} acknowledged by {event.actor}")


def parse_duration(text: str) -> int:
    """Return the seconds of a duration such as 30m, 2h, 1d or 1h30m."""
    import re

    parts = re.fullmatch(r"\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*", text or "")
    if not text or not text.strip() or parts is None:
        raise InvalidInput(f"Duration {text!r} is not valid: use minutes, hours or days, e.g. 30m, 2h, 1d.")
    days, hours, minutes = (int(p or 0) for p in parts.groups())
    return days * 86400 + hours * 3600 + minutes * 60


@alerts_app.command("snooze")
def snooze_command(alert: Annotated[str, typer.Argument(help="Alert id.")],
                   duration: Annotated[str, typer.Argument(help="How long, e.g. 30m, 2h, 1d.")],
                   note: NoteOption = None, actor: ActorOption = None, as_json: JsonOption = False) -> None:
    """Hold an open alert's escalation for a while."""
    from tickwarden import alerts

    alert_id = _alert_id(alert)
    with _db() as db:
        event = alerts.snooze(db, alert_id, parse_duration(duration), _actor(actor), WallClock().now(), note=note)
    if as_json:
        print_json(event_dict(event))
    else:
        console.print(f"alert {alert_id} snoozed until {event.data.get('until')}")


@alerts_app.command("resolve")
def resolve_command(alert: Annotated[str, typer.Argument(help="Alert id.")],
                    note: Annotated[str, typer.Option("--note", help="Why it is resolved (required).")],
                    actor: ActorOption = None, as_json: JsonOption = False) -> None:
    """Resolve an open alert by hand, saying why."""
    from tickwarden import alerts

    alert_id = _alert_id(alert)
    with _db() as db:
        event = alerts.resolve(db, alert_id, note, _actor(actor), WallClock().now())
    if as_json:
        print_json(event_dict(event))
    else:
        console.print(f"alert {alert_id} resolved by {event.actor}")
