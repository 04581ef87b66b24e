"""`tickwarden maintenance`: list, add and remove maintenance windows."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tickwarden.cli import app
from tickwarden.cli.output import print_json, print_table
from tickwarden.clock import WallClock, isoformat_z
from tickwarden.errors import InvalidInput, UsageError

if TYPE_CHECKING:
    from tickwarden.models import Window

maintenance_app = typer.Typer(help="Maintenance windows: nothing is delivered for a covered workflow.",
                              no_args_is_help=True)
app.add_typer(maintenance_app, name="maintenance")

Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _as_dict(window: Window, active_until: datetime | None) -> dict[str, Any]:
    return {"id": window.id, "tenant": window.tenant, "workflow": window.workflow, "source": window.source,
            "start": window.starts_at, "end": window.ends_at, "cron": window.cron, "timezone": window.timezone,
            "duration_seconds": window.duration_seconds, "note": window.note, "created_by": window.created_by,
            "created_at": window.created_at, "active_until": active_until}


def _target(target: str) -> tuple[str, str | None]:
    """TENANT or TENANT/WORKFLOW."""
    tenant, _, workflow = target.partition("/")
    if not tenant or (target.count("/") > 1) or ("/" in target and not workflow):
        raise UsageError(f"{target[:80]!r} is not TENANT or TENANT/WORKFLOW.")
    return tenant, workflow or None


@maintenance_app.command("list")
def list_command(tenant: Annotated[str | None, typer.Argument(help="Only this tenant's windows.")] = None,
                 as_json: Json = False) -> None:
    """List the maintenance windows, and which are active now."""
    from tickwarden import maintenance
    from tickwarden.db import Database

    now = WallClock().now()
    with Database(max_size=1) as db, db.transaction() as store:
        windows = maintenance.list_windows(store, tenant)
    active = {w.id: end for w, end in maintenance.active_windows(windows, now)}
    if as_json:
        print_json([_as_dict(w, active.get(w.id)) for w in windows])
        return
    print_table(("id", "scope", "when", "active until", "source", "note"),
                [(w.id, w.scope, w.describe(), isoformat_z(active[w.id]) if w.id in active else "",
                  w.source, w.note or "") for w in windows], no_wrap=("id", "scope"))


@maintenance_app.command("add")
def add_command(
    target: Annotated[str, typer.Argument(help="TENANT (every workflow) or TENANT/WORKFLOW.")],
    start: Annotated[str | None, typer.Option(help="One-off: start, e.g. 2026-12-01T01:00:00Z.")] = None,
    end: Annotated[str | None, typer.Option(help="One-off: end (exclusive).")] = None,
    cron: Annotated[str | None, typer.Option(help="Recurring: when each occurrence starts.")] = None,
    duration: Annotated[str | None, typer.Option(help="Recurring: how long each lasts (30m, 2h, 1d).")] = None,
    timezone: Annotated[str | None, typer.Option(help="Recurring: the cron's IANA zone (default UTC).")] = None,
    note: Annotated[str | None, typer.Option(help="Why; shown on the dashboard.")] = None,
    actor: Annotated[str, typer.Option(help="Who adds it (recorded).")] = "cli",
    as_json: Json = False,
) -> None:
    """Add a one-off (--start/--end) or recurring (--cron/--duration [--timezone]) window."""
    from tickwarden import maintenance
    from tickwarden.db import Database

    tenant, workflow = _target(target)
    try:
        spec = maintenance.window_spec(start=start, end=end, cron=cron, duration=duration, timezone=timezone,
                                       note=note)
    except InvalidInput as exc:
        raise UsageError(exc.message) from None
    now = WallClock().now()
    with Database(max_size=1) as db, db.transaction() as store:
        window = maintenance.add_window(store, tenant, workflow, spec, actor, now)
        windows = maintenance.list_windows(store, tenant)
    active = {w.id: end for w, end in maintenance.active_windows(windows, now)}
    if as_json:
        print_json(_as_dict(window, active.get(window.id)))
        return
    state = f"; active until {isoformat_z(active[window.id])}" if window.id in active else ""
    print(f"Added maintenance window {window.id} for {window.scope}: {window.describe()}{state}.")


@maintenance_app.command("remove")
def remove_command(window_id: Annotated[int, typer.Argument(help="The window's id (see `maintenance list`).")]
                   ) -> None:
    """Remove a window added through the CLI, the API or the dashboard (a file's windows go with the file)."""
    from tickwarden import maintenance
    from tickwarden.db import Database

    with Database(max_size=1) as db, db.transaction() as store:
        window = maintenance.remove_window(store, window_id)
    print(f"Removed maintenance window {window.id} for {window.scope}.")
