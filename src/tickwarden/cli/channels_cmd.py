"""`tickwarden channels` and `tickwarden outbox`: where notifications go and how delivery is doing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock
from tickwarden.errors import Conflict, InvalidInput, NotFound, UsageError

if TYPE_CHECKING:
    from tickwarden.db import Database
    from tickwarden.store.outbox import Channel

channels_app = typer.Typer(help="Notification channels: list, add, test, re-enable.", invoke_without_command=True)
app.add_typer(channels_app, name="channels")


def _find(db: Database, name: str, tenant: str | None) -> Channel:
    with db.transaction() as store:
        found = store.outbox.find_notification_channels(name, tenant)
    if not found:
        where = f" of tenant {tenant!r}" if tenant else ""
        raise NotFound(f"No notification channel named {name!r}{where}.")
    if len(found) > 1:
        raise Conflict(f"Several channels are named {name!r}; pass --tenant to choose one.")
    return found[0]


def _channel_dict(channel: Channel) -> dict[str, Any]:
    return {
        "id": channel.id, "tenant": channel.tenant, "name": channel.name, "kind": channel.kind,
        "audience": channel.audience, "config": channel.config, "secret_ref": channel.secret_ref,
        "enabled": channel.enabled, "disabled_reason": channel.disabled_reason, "disabled_at": channel.disabled_at,
        "severities": channel.severities, "events": channel.events,
    }


@channels_app.callback()
def list_command(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List channels with their state and delivery backlog."""
    from rich.table import Table
    from tickwarden.db import Database

    if ctx.invoked_subcommand is not None:
        return
    with Database(max_size=1) as db, db.transaction() as store:
        rows = store.outbox.list_notification_channels()
    data = [{**_channel_dict(r.channel), "backlog": {"pending": r.pending, "sending": r.sending,
                                                      "failed": r.failed, "dead": r.dead, "sent": r.sent}}
            for r in rows]
    if as_json:
        print_json(data)
        return
    if not data:
        console.print("no notification channels (add one with `tickwarden channels add`)")
        return
    table = Table(title="notification channels")
    for column in ("tenant", "name", "kind", "audience", "state", "pending", "failed", "dead", "sent"):
        table.add_column(column)
    for r in rows:
        c = r.channel
        state = "enabled" if c.enabled else f"disabled: {c.disabled_reason or ''}"
        table.add_row(c.tenant or "(platform)", c.name, c.kind, c.audience, state, str(r.pending + r.sending),
                      str(r.failed), str(r.dead), str(r.sent))
    console.print(table)


def _parse_config(pairs: list[str]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"Setting {item!r} is not of the form key=value.")
        text = value.strip()
        parsed: Any = text
        if text.lower() in ("true", "false"):
            parsed = text.lower() == "true"
        elif text.isdigit():
            parsed = int(text)
        elif "," in text and key.strip() == "to":
            parsed = [part.strip() for part in text.split(",") if part.strip()]
        config[key.strip()] = parsed
    return config


@channels_app.command("add")
def add_command(
    name: Annotated[str, typer.Argument(help="Channel name, unique within its tenant.")],
    kind: Annotated[str, typer.Option("--kind", help="slack, email, webhook, pagerduty, teams or recording.")],
    tenant: Annotated[str | None, typer.Option("--tenant", help="Tenant; omit for the platform's channel.")] = None,
    audience: Annotated[str | None, typer.Option("--audience", help="customer, engineering or shadow.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Config key=value (repeatable), e.g. channel=C123.")] = [],  # noqa: B006
    secret_ref: Annotated[str | None, typer.Option("--secret-ref", help="env:NAME holding the token or key.")] = None,
    severity: Annotated[list[str], typer.Option("--severity", help="Take only this severity (repeatable); default all.")] = [],  # noqa: B006
    event: Annotated[list[str], typer.Option("--event", help="Take only this event kind (repeatable); default all.")] = [],  # noqa: B006
) -> None:
    """Create or update a notification channel."""
    from tickwarden import secrets
    from tickwarden.db import Database
    from tickwarden.store.outbox import AUDIENCES, CHANNEL_KINDS
    from tickwarden.workflow_file import ROUTABLE_EVENTS, ROUTABLE_SEVERITIES, channel_config_problem

    for value, allowed, label in ((severity, ROUTABLE_SEVERITIES, "Severity"), (event, ROUTABLE_EVENTS, "Event")):
        unknown = [v for v in value if v not in allowed]
        if unknown:
            raise UsageError(f"{label} {unknown[0]!r} is not one of {', '.join(allowed)}.")
    if kind not in CHANNEL_KINDS:
        raise InvalidInput(f"Kind {kind!r} is not one of {', '.join(CHANNEL_KINDS)}.")
    audience = audience or ("customer" if tenant else "engineering")
    if audience not in AUDIENCES:
        raise InvalidInput(f"Audience {audience!r} is not one of {', '.join(AUDIENCES)}.")
    if audience == "customer" and not tenant:
        raise InvalidInput("A customer channel belongs to a tenant: pass --tenant.")
    if secret_ref is not None and secrets.platform_variable(secret_ref) is None:
        raise InvalidInput("A secret reference looks like env:NAME; the value itself is never stored.")
    config = _parse_config(set_)
    problem = channel_config_problem(kind, config, secret_ref)
    if problem is not None:
        key, reason = problem
        raise UsageError(f"Option --secret-ref: {reason}." if key == "secret_ref" else f"Setting {key!r}: {reason}.")
    now = WallClock().now()
    with Database(max_size=1) as db, db.transaction() as store:
        tenant_id = None
        if tenant:
            found = store.catalog.get_tenant_by_name(tenant)
            if found is None:
                raise NotFound(f"No tenant named {tenant!r}.")
            tenant_id = found.id
        channel = store.outbox.upsert_notification_channel(tenant_id=tenant_id, name=name, kind=kind, audience=audience,
                                                    now=now, config=config, secret_ref=secret_ref,
                                                    severities=sorted(set(severity)) or None,
                                                    events=sorted(set(event)) or None)
    console.print(f"channel {channel.label} ({channel.kind}, {channel.audience}) saved")


@channels_app.command("test")
def test_command(
    name: Annotated[str, typer.Argument(help="Channel name.")],
    tenant: Annotated[str | None, typer.Option("--tenant", help="The channel's tenant, if the name is ambiguous.")] = None,
) -> None:
    """Send a test message through the channel's real transport."""
    from tickwarden.db import Database

    from tickwarden.notifier import send_test_message
    from tickwarden.transports import default_transports
    from tickwarden.transports.base import TransportError

    with Database(max_size=1) as db:
        channel = _find(db, name, tenant)
    transport = default_transports()[channel.kind]
    try:
        delivery = send_test_message(channel, transport, WallClock().now())
    except TransportError as exc:
        kind = "permanent" if exc.permanent else "transient"
        raise Conflict(f"The test message to {channel.label} failed ({kind}): {exc.message}") from None
    console.print(f"test message delivered to {channel.label} (message id {delivery.message_id})")


@channels_app.command("enable")
def enable_command(
    name: Annotated[str, typer.Argument(help="Channel name.")],
    tenant: Annotated[str | None, typer.Option("--tenant", help="The channel's tenant, if the name is ambiguous.")] = None,
) -> None:
    """Re-enable a channel that a permanent error disabled (after fixing its configuration)."""
    from tickwarden.db import Database

    with Database(max_size=1) as db:
        channel = _find(db, name, tenant)
        with db.transaction() as store:
            store.outbox.enable_notification_channel(channel.id)
    console.print(f"channel {channel.label} enabled; new alert events will be delivered to it")


@app.command("outbox")
def outbox_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show the notification outbox: deliveries by status and the latest problems."""
    from rich.table import Table
    from tickwarden.db import Database

    with Database(max_size=1) as db, db.transaction() as store:
        counts = store.outbox.status_counts()
        problems = store.outbox.list_outbox_problems(20)
    data = {
        **counts,
        "problems": [{"id": p.id, "status": p.status, "tries": p.tries, "next_attempt_at": p.next_attempt_at,
                      "error": p.last_error, "alert": p.alert_id, "event": p.event,
                      "channel": f"{p.tenant or 'platform'}/{p.channel}"} for p in problems],
    }
    if as_json:
        print_json(data)
        return
    console.print("outbox: " + ", ".join(f"{counts[s]} {s}" for s in ("pending", "sending", "failed", "dead", "sent"))
                  + "".join(f", {counts[s]} {s}" for s in ("held", "suppressed") if counts[s]))
    if problems:
        table = Table(title="latest failed and dead deliveries")
        for column in ("id", "status", "tries", "channel", "alert", "event", "error"):
            table.add_column(column)
        for p in problems:
            table.add_row(str(p.id), p.status, str(p.tries), f"{p.tenant or 'platform'}/{p.channel}", str(p.alert_id),
                          p.event, p.last_error or "")
        console.print(table)
