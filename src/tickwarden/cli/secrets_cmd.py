"""`tickwarden secrets`: set, list, delete and rotate a tenant's secrets (values are never shown)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock, isoformat_z
from tickwarden.errors import InvalidInput, NotFound, UsageError

secrets_app = typer.Typer(help="A tenant's secrets, referred to as secret:NAME by its steps and channels.",
                          no_args_is_help=True)
app.add_typer(secrets_app, name="secrets")


def _read_value(file: Path | None) -> str:
    """Read the value from a file or stdin, never from the command line (which `ps` and shell history keep)."""
    if file is not None:
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise InvalidInput(f"Cannot read {file}: {exc.strerror}.") from None
    elif sys.stdin.isatty():
        raw = typer.prompt("value", hide_input=True).encode()
    else:
        raw = sys.stdin.buffer.read()
    try:
        value = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("The secret value is not UTF-8 text.") from None
    # `echo value | …` and editors add one newline that is not part of the secret.
    if value.endswith("\r\n"):
        value = value[:-2]
    elif value.endswith("\n"):
        value = value[:-1]
    return value


def _tenant_id(store, tenant: str) -> int:  # type: ignore[no-untyped-def]
    found = store.catalog.get_tenant_by_name(tenant)
    if found is None:
        raise NotFound(f"No tenant named {tenant!r}.")
    return found.id


@secrets_app.command("set")
def set_command(
    tenant: Annotated[str, typer.Argument(help="The tenant the secret belongs to.")],
    name: Annotated[str, typer.Argument(help="The secret's name, referred to as secret:NAME.")],
    file: Annotated[Path | None, typer.Option("--file", help="Read the value from this file instead of stdin.")] = None,
    pasted: Annotated[list[str] | None, typer.Argument(hidden=True, show_default=False)] = None,
) -> None:
    """Store a secret for a tenant; the value comes from stdin (or --file) and is stored encrypted."""
    from tickwarden import secrets
    from tickwarden.db import Database

    if pasted:
        # Taken as an argument only to be refused without echoing it (Typer's own usage
        # error would repeat it); it already sits in the shell's history.
        raise UsageError("The secret value must come from stdin or --file, never as an argument "
                         "(it stays in shell history); nothing was stored.")
    secrets.check_name(name)
    value = secrets.check_value(_read_value(file))
    keyring = secrets.Keyring.from_environment()
    with Database(max_size=1) as db, db.transaction() as store:
        store.api.enter_tenant_context(None, platform=True)
        info = secrets.set_secret(store, keyring, _tenant_id(store, tenant), name, value, WallClock().now())
    console.print(f"stored secret:{info.name} for tenant {tenant}")


@secrets_app.command("list")
def list_command(
    tenant: Annotated[str, typer.Argument(help="The tenant whose secrets to list.")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List a tenant's secrets by name (never their values)."""
    from rich.table import Table
    from tickwarden.db import Database

    with Database(max_size=1) as db, db.transaction() as store:
        store.api.enter_tenant_context(None, platform=True)
        found = store.secrets.list_secrets(_tenant_id(store, tenant))
    rows = [{"name": s.name, "reference": f"secret:{s.name}", "created_at": isoformat_z(s.created_at),
             "updated_at": isoformat_z(s.updated_at)} for s in found]
    if as_json:
        print_json(rows)
        return
    table = Table("name", "reference", "created", "updated")
    for r in rows:
        table.add_row(r["name"], r["reference"], r["created_at"] or "", r["updated_at"] or "")
    console.print(table)


@secrets_app.command("delete")
def delete_command(
    tenant: Annotated[str, typer.Argument(help="The tenant the secret belongs to.")],
    name: Annotated[str, typer.Argument(help="The secret's name.")],
) -> None:
    """Delete a tenant's secret; steps that refer to it fail as `config` until it is set again."""
    from tickwarden import secrets
    from tickwarden.db import Database

    with Database(max_size=1) as db, db.transaction() as store:
        store.api.enter_tenant_context(None, platform=True)
        secrets.delete_secret(store, _tenant_id(store, tenant), name)
    console.print(f"deleted secret:{name} of tenant {tenant}")


@secrets_app.command("rotate")
def rotate_command() -> None:
    """Re-encrypt every secret under the current TICKWARDEN_SECRET_KEY (old keys in TICKWARDEN_SECRET_KEYS_OLD)."""
    from tickwarden import secrets
    from tickwarden.db import Database

    keyring = secrets.Keyring.from_environment()
    with Database(max_size=2) as db:
        changed = secrets.rotate(db, keyring)
    console.print(f"re-encrypted {changed} secret(s) under the current key")
