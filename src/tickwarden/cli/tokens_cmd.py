"""`tickwarden tokens`: create, list and revoke API tokens (stored hashed, shown once)."""

from __future__ import annotations

from typing import Annotated

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock, isoformat_z
from tickwarden.errors import InvalidInput, NotFound

tokens_app = typer.Typer(help="API tokens for the REST API and the dashboard.", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")


@tokens_app.command("create")
def create_command(
    name: Annotated[str, typer.Option("--name", help="What the token is for, e.g. 'alice' or 'grafana'.")],
    tenant: Annotated[str | None, typer.Option("--tenant", help="A member token of this tenant.")] = None,
    platform: Annotated[bool, typer.Option("--platform", help="A platform token that sees every tenant.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Create a token and print it once; only its SHA-256 hash is stored."""
    from tickwarden.api.deps import hash_token, new_token
    from tickwarden.db import Database

    if platform == (tenant is not None):
        raise InvalidInput("Give exactly one of --tenant TENANT or --platform.")
    if not name.strip() or len(name) > 100:
        raise InvalidInput("The token name must be 1 to 100 characters.")
    token = new_token()
    now = WallClock().now()
    with Database(max_size=1) as db, db.transaction() as store:
        store.api.enter_tenant_context(None, platform=True)
        tenant_id = None
        if tenant is not None:
            found = store.catalog.get_tenant_by_name(tenant)
            if found is None:
                raise NotFound(f"No tenant named {tenant!r}.")
            tenant_id = found.id
        created = store.api.create_api_token(tenant_id=tenant_id, role="platform" if platform else "member",
                                         name=name.strip(), token_hash=hash_token(token), now=now)
    if as_json:
        print_json({"id": created.id, "name": created.name, "role": created.role, "tenant": tenant, "token": token})
        return
    print(token)
    typer.echo(f"token {created.id} ({created.role}{' of ' + tenant if tenant else ''}): store it now, "
               "it is not shown again.", err=True)


@tokens_app.command("list")
def list_command(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List tokens (never their values)."""
    from rich.table import Table
    from tickwarden.db import Database

    with Database(max_size=1) as db, db.transaction() as store:
        store.api.enter_tenant_context(None, platform=True)
        tokens = store.api.list_api_tokens()
    rows = [{"id": t.id, "name": t.name, "role": t.role, "tenant": t.tenant_name,
             "created_at": isoformat_z(t.created_at), "last_used_at": isoformat_z(t.last_used_at),
             "revoked_at": isoformat_z(t.revoked_at)} for t in tokens]
    if as_json:
        print_json(rows)
        return
    table = Table("id", "name", "role", "tenant", "created", "last used", "revoked")
    for r in rows:
        table.add_row(str(r["id"]), r["name"], r["role"], r["tenant"] or "—", r["created_at"] or "",
                      r["last_used_at"] or "never", r["revoked_at"] or "")
    console.print(table)


@tokens_app.command("revoke")
def revoke_command(token_id: Annotated[int, typer.Argument(help="The token's id (see 'tokens list').")]) -> None:
    """Revoke a token: it stops working at once."""
    from tickwarden.db import Database

    with Database(max_size=1) as db, db.transaction() as store:
        store.api.enter_tenant_context(None, platform=True)
        if not store.api.revoke_api_token(token_id, WallClock().now()):
            raise NotFound(f"No live token with id {token_id}.")
    console.print(f"revoked token {token_id}")
