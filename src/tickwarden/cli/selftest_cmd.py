"""`tickwarden selftest`: synthetic runs through the live service's loops and routes, checked and removed."""

from __future__ import annotations

from typing import Annotated

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json, print_table, status
from tickwarden.clock import WallClock
from tickwarden.errors import UsageError


@app.command("selftest")
def selftest_command(
    tenant: Annotated[str | None, typer.Option("--tenant", help="Also test this tenant's channels.")] = None,
    no_send: Annotated[bool, typer.Option("--no-send", help="Stop at the outbox: deliver nothing.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the service's loops.")] = 120.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check the running service end to end with synthetic runs; exit 0 only when every route passed."""
    from tickwarden.db import Database

    from tickwarden.selftest import Selftest

    if not 1 <= timeout <= 3600:
        raise UsageError("--timeout must be between 1 and 3600 seconds.")
    with Database(max_size=2, application_name="tickwarden-selftest") as db:
        report = Selftest(db, WallClock(), tenant=tenant, no_send=no_send, timeout=timeout).run()
    if as_json:
        print_json(report.as_dict())
    else:
        print_table(("check", "result", "detail"),
                    [(c.name, status("passed" if c.passed else "failed"), c.detail) for c in report.checks],
                    title=f"selftest {report.tenant}")
        print_table(("route", "kind", "expected", "delivered", "held", "result", "detail"),
                    [(r.route, r.kind, r.expected, r.delivered, r.held, status("passed" if r.passed else "failed"),
                      r.detail) for r in report.routes], no_wrap=("route",))
        cleaned = "its records were removed" if report.cleaned_up else "its records could NOT be removed"
        console.print(f"selftest {'passed' if report.passed else 'FAILED'}; {cleaned}.")
    if not report.passed or not report.cleaned_up:
        raise typer.Exit(1)
