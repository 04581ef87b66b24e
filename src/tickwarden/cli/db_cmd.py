"""`tickwarden db`: bring the schema up to date and show where the database is."""

from __future__ import annotations

from typing import Annotated

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock

db_app = typer.Typer(help="Database schema and connection.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def upgrade_command() -> None:
    """Apply every pending migration."""
    from tickwarden.db import Database
    from tickwarden.migrate import upgrade

    with Database(max_size=1) as db, db.connection() as conn:
        applied = upgrade(conn, WallClock().now())
    if applied:
        for migration in applied:
            console.print(f"applied {migration.version:04d}_{migration.name}")
    else:
        console.print("the schema is up to date")


@db_app.command("status")
def status_command(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show which database is in use and which migrations are pending."""
    from tickwarden.db import Database, describe_url
    from tickwarden.migrate import pending

    with Database(max_size=1) as db, db.connection() as conn:
        waiting = pending(conn)
        data = {"database": describe_url(db.url), "pending": [f"{m.version:04d}_{m.name}" for m in waiting]}
    if as_json:
        print_json(data)
    else:
        console.print(f"database: {data['database']}")
        console.print(f"pending migrations: {', '.join(data['pending']) or 'none'}")
