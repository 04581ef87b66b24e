"""The `tickwarden` command line: one module per family of commands, all on one app.

Errors a user can cause are `TickwardenError`s: they are printed as one sentence on
stderr with a non-zero exit, never as a traceback.
"""

from __future__ import annotations

import logging
import sys

import typer

app = typer.Typer(
    name="tickwarden",
    help="Run cron-scheduled workflows for many tenants; alert once, in one thread, with an owner.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Importing a command module registers its commands on `app`.
from tickwarden.cli import alerts_cmd, catalog_cmd, channels_cmd, db_cmd, profile_cmd, service_cmd, sim_cmd, tokens_cmd, worker_cmd  # noqa: E402,F401
from tickwarden.cli import secrets_cmd  # noqa: E402,F401


def main() -> None:
    """Run the CLI, turning tickwarden's errors into one clear line and exit status 1."""
    from tickwarden.errors import TickwardenError
    from tickwarden.logs import configure_or_exit

    configure_or_exit()
    try:
        app(standalone_mode=False)
    except TickwardenError as exc:
        print(f"tickwarden: {exc.message}", file=sys.stderr)
        sys.exit(1)
    except typer.Abort:
        print("tickwarden: aborted.", file=sys.stderr)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click's usage errors and anything unforeseen: one line, no traceback
        import click
        import psycopg

        if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName):
            print("tickwarden: this database has no tickwarden schema yet; run `tickwarden db upgrade` first.",
                  file=sys.stderr)
            sys.exit(1)
        if isinstance(exc, psycopg.OperationalError):
            print("tickwarden: the database connection failed; check TICKWARDEN_DATABASE_URL and that the server is up.",
                  file=sys.stderr)
            sys.exit(1)
        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        logging.getLogger("tickwarden").debug("unexpected error", exc_info=True)
        print(f"tickwarden: unexpected {type(exc).__name__}; rerun with TICKWARDEN_DEBUG=1 for details.", file=sys.stderr)
        if __import__("os").environ.get("TICKWARDEN_DEBUG"):
            raise
        sys.exit(1)
