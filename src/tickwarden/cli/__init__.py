"""The `tickwarden` command line: one module per family of commands, all on one app.

Errors a user can cause are `TickwardenError`s: they are printed as one sentence on
stderr with a non-zero exit, never as a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

app = typer.Typer(
    name="tickwarden",
    help="Run cron-scheduled workflows for many tenants; alert once, in one thread, with an owner.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from tickwarden import __version__

        print(f"tickwarden {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """Run cron-scheduled workflows for many tenants; alert once, in one thread, with an owner."""


# Importing a command module registers its commands on `app`.
from tickwarden.cli import alerts_cmd, catalog_cmd, channels_cmd, db_cmd, erase_cmd, profile_cmd, retention_cmd, service_cmd, sim_cmd, tick_cmd, tokens_cmd, worker_cmd  # noqa: E402,F401
from tickwarden.cli import secrets_cmd  # noqa: E402,F401
from tickwarden.cli import checkin_cmd  # noqa: E402,F401
from tickwarden.cli import selftest_cmd  # noqa: E402,F401
from tickwarden.cli import maintenance_cmd  # noqa: E402,F401


def main() -> None:
    """Run the CLI, turning tickwarden's errors into one clear line and exit status 1.

    Typer runs in standalone mode so that its own errors (usage, bad parameters,
    aborts) read and exit the way Typer prints them, status 2 for usage errors;
    only what escapes it is translated here.
    """
    from tickwarden.errors import TickwardenError
    from tickwarden.logs import configure_or_exit

    configure_or_exit()
    try:
        app()
    except TickwardenError as exc:
        print(f"tickwarden: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # anything unforeseen: one line, no traceback
        import psycopg

        if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName):
            print("tickwarden: this database has no tickwarden schema yet; run `tickwarden db upgrade` first.",
                  file=sys.stderr)
            sys.exit(1)
        from tickwarden.db import rolled_back

        if rolled_back(exc):
            print("tickwarden: the database rolled this command back (it met another's locks); nothing of it was "
                  "changed, run it again.", file=sys.stderr)
            sys.exit(1)
        if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
            print("tickwarden: the database connection failed; check TICKWARDEN_DATABASE_URL and that the server is up.",
                  file=sys.stderr)
            sys.exit(1)
        logging.getLogger("tickwarden").debug("unexpected error", exc_info=True)
        print(f"tickwarden: unexpected {type(exc).__name__}; rerun with TICKWARDEN_DEBUG=1 for details.", file=sys.stderr)
        if os.environ.get("TICKWARDEN_DEBUG"):
            raise
        sys.exit(1)
