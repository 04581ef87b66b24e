"""`tickwarden tick`: what a schedule's CronJob pod runs (record the tick, execute its attempt)."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock, isoformat_z, parse_utc
from tickwarden.db import Database
from tickwarden.errors import InvalidInput
from tickwarden.loops import replica_id
from tickwarden.triggers.kubernetes import tick_from_job_name
from tickwarden.triggers.kubernetes_tick import record_tick, run_tick


def _usage(message: str) -> SystemExit:
    """Print a usage error as one line and return the exit (status 2) to raise."""
    print(f"tickwarden tick: {message}", file=sys.stderr)
    # SystemExit, not typer.Exit: the CLI runs typer outside standalone mode, where an
    # Exit's status is returned rather than used.
    return SystemExit(2)


@app.command("tick")
def tick_command(
    schedule: Annotated[int, typer.Option("--schedule", help="The schedule's id (the CronJob's label).")],
    job_name: Annotated[str | None, typer.Option(
        "--job-name", help="The Job the CronJob created; its name carries the tick.")] = None,
    at: Annotated[str | None, typer.Option("--at", help="The tick itself, ISO 8601 with an offset or Z.")] = None,
    record_only: Annotated[bool, typer.Option(
        "--record-only", help="Record the run and leave its attempt to the worker pool.")] = False,
    lease: Annotated[float, typer.Option("--lease", help="Lease length in seconds, renewed every third.")] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Record one tick of a schedule as a run (once, however often it is fired) and execute it."""
    if (job_name is None) == (at is None):
        raise _usage("give exactly one of --job-name and --at.")
    if schedule < 1 or lease < 1:
        raise _usage("--schedule and --lease must be at least 1.")
    try:
        tick = tick_from_job_name(schedule, job_name) if job_name is not None else parse_utc(at or "")
    except InvalidInput as exc:
        raise _usage(exc.message) from None
    except ValueError:
        raise _usage(f"--at {at[:40]!r} is not an ISO 8601 time with an offset or Z.") from None
    logging.getLogger("tickwarden").setLevel(logging.INFO)
    clock = WallClock()
    with Database(min_size=1, max_size=4, application_name="tickwarden-tick") as db:
        if record_only:
            outcome = record_tick(db, schedule, tick, clock.now())
        else:
            outcome = run_tick(db, schedule, tick, clock, replica_id("tick"), lease_seconds=lease)
    finished = outcome.finished
    if as_json:
        print_json({"schedule": schedule, "tick": isoformat_z(tick), "status": outcome.status,
                    "reason": outcome.reason, "run": outcome.run_id,
                    "attempt": outcome.attempt.id if outcome.attempt else None,
                    "run_status": finished.run_status if finished else None})
        return
    line = f"schedule {schedule}: {outcome.reason}"
    if outcome.attempt is not None:
        line += f"; attempt {outcome.attempt.id}: " + (f"run {finished.run_status}" if finished else "released")
    console.print(line)
