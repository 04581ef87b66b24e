"""`tickwarden retention`: show and set a tenant's retention per class."""

from __future__ import annotations

from typing import Annotated

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock
from tickwarden.errors import NotFound, UsageError
from tickwarden.retention_days import CLASSES, MAX_DAYS

retention_app = typer.Typer(help="How long each class of data is kept, per tenant.", no_args_is_help=True)
app.add_typer(retention_app, name="retention")

Days = Annotated[int | None, typer.Option(min=1, max=MAX_DAYS)]


def _show(tenant: str, days: dict[str, int], overrides: dict[str, int | None], as_json: bool) -> None:
    from rich.table import Table

    if as_json:
        print_json({"tenant": tenant, "days": days, "overrides": overrides})
        return
    table = Table("class", "days", "source")
    for klass in CLASSES:
        table.add_row(klass, str(days[klass]), "tenant" if overrides.get(klass) else "default")
    console.print(table)


@retention_app.command("show")
def show_command(tenant: str, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Print the days each class is kept for a tenant, and where each figure comes from."""
    from tickwarden import retention
    from tickwarden.db import Database

    with Database(max_size=1) as db, db.transaction() as store:
        store.api.enter_tenant_context(None, platform=True)
        found = store.catalog.get_tenant_by_name(tenant)
        if found is None:
            raise NotFound(f"No tenant named {tenant!r}.")
        policy = store.retention.get_policy(found.id)
    overrides = {k: getattr(policy, f"{k}_days") for k in CLASSES} if policy else {}
    _show(tenant, retention.effective_days(policy), overrides, as_json)


@retention_app.command("set")
def set_command(
    tenant: str,
    metadata_days: Days = None,
    logs_days: Days = None,
    payloads_days: Days = None,
    outbox_days: Days = None,
    alerts_days: Days = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Replace a tenant's overrides; a class not given returns to the platform default."""
    from pydantic import ValidationError

    from tickwarden import retention
    from tickwarden.db import Database

    try:
        spec = retention.RetentionSpec(metadata_days=metadata_days, logs_days=logs_days, payloads_days=payloads_days,
                                       outbox_days=outbox_days, alerts_days=alerts_days)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise UsageError(f"--{str(error['loc'][0]).replace('_', '-')}: {error['msg'].lower()}.") from None
    with Database(max_size=1) as db, db.transaction() as store:
        store.api.enter_tenant_context(None, platform=True)
        found = store.catalog.get_tenant_by_name(tenant)
        if found is None:
            raise NotFound(f"No tenant named {tenant!r}.")
        policy = retention.set_tenant_retention(store, found.id, spec, WallClock().now())
    _show(tenant, retention.effective_days(policy), spec.days(), as_json)
