"""`tickwarden erase`: remove a tenant, or every trace of one person (GDPR art. 17)."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock
from tickwarden.errors import InvalidInput, UsageError

if TYPE_CHECKING:
    from tickwarden.store import Store


def _usage(message: str) -> None:
    raise UsageError(message)


def _actor(actor: str | None) -> str:
    if actor and actor.strip():
        return actor.strip()[:100]
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


@app.command("erase")
def erase_command(
    subject: Annotated[str | None, typer.Option("--subject", help="A person's email address.")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="A tenant: everything of it goes.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would go; change nothing.")] = False,
    actor: Annotated[str | None, typer.Option("--actor", help="Who asks (default: your user name).")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Erase a tenant (--tenant) or a person (--subject EMAIL); --dry-run reports what would go."""
    from rich.table import Table
    from tickwarden import erasure
    from tickwarden.db import Database

    if (subject is None) == (tenant is None):
        _usage("give exactly one of --subject EMAIL or --tenant TENANT.")
    if subject is not None:
        try:
            erasure.parse_subject(subject)
        except InvalidInput as exc:
            _usage(exc.message)
    who = _actor(actor)
    now = WallClock().now()
    def erase(store: Store) -> erasure.ErasureReport:
        store.api.enter_tenant_context(None, platform=True)
        if tenant is not None:
            return erasure.erase_tenant(store, tenant, actor=who, now=now, dry_run=dry_run)
        return erasure.erase_subject(store, subject or "", actor=who, now=now, dry_run=dry_run)

    # The live loops lock the same rows in their own order: a deadlock's victim is run again whole.
    with Database(max_size=1, application_name="tickwarden-erase") as db:
        report = db.retrying(erase)
    if as_json:
        print_json(report.as_dict())
        return
    verb = "would change" if dry_run else "changed"
    table = Table("table", "rows")
    for where, count in sorted(report.counts.items()):
        table.add_row(where, str(count))
    console.print(table)
    done = "dry run: nothing was changed" if dry_run else f"recorded as erasure {report.audit_id}"
    console.print(f"{report.kind} erasure {verb} {report.total} rows; {done}.")
