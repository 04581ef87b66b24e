"""`tickwarden tick`: what a schedule's CronJob pod runs (record the tick, execute its attempt), and a retry's Job."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock, isoformat_z, parse_utc
from tickwarden.errors import InvalidInput

if TYPE_CHECKING:
    from tickwarden.triggers.kubernetes_tick import TickOutcome


def _usage(message: str) -> SystemExit:
    """Print a usage error as one line and return the exit (status 2) to raise."""
    print(f"tickwarden tick: {message}", file=sys.stderr)
    # SystemExit, not typer.Exit: the CLI runs typer outside standalone mode, where an
    # Exit's status is returned rather than used.
    return SystemExit(2)


@app.command("tick")
def tick_command(
    schedule: Annotated[int | None, typer.Option("--schedule", help="The schedule's id (the CronJob's label).")] = None,
    job_name: Annotated[str | None, typer.Option(
        "--job-name", help="The Job the CronJob created; its name carries the tick.")] = None,
    at: Annotated[str | None, typer.Option("--at", help="The tick itself, ISO 8601 with an offset or Z.")] = None,
    attempt: Annotated[int | None, typer.Option(
        "--attempt", help="Run this queued attempt instead (what a retry's Job runs).")] = None,
    record_only: Annotated[bool, typer.Option(
        "--record-only", help="Record the run and leave its attempt to the worker pool.")] = False,
    lease: Annotated[float, typer.Option("--lease", help="Lease length in seconds, renewed every third.")] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Record one tick of a schedule as a run (once, however often it is fired) and execute it."""
    from tickwarden.db import Database
    from tickwarden.loops import replica_id
    from tickwarden.triggers.kubernetes import tick_from_job_name
    from tickwarden.triggers.kubernetes_tick import record_tick, run_attempt, run_tick

    if lease < 1:
        raise _usage("--lease must be at least 1.")
    clock = WallClock()
    if attempt is not None:
        if schedule is not None or job_name is not None or at is not None or record_only:
            raise _usage("--attempt goes alone: it runs one queued attempt, not a tick.")
        if attempt < 1:
            raise _usage("--attempt must be at least 1.")
        logging.getLogger("tickwarden").setLevel(logging.INFO)
        with Database(min_size=1, max_size=4, application_name="tickwarden-tick") as db:
            outcome = run_attempt(db, attempt, clock, replica_id("retry"), lease_seconds=lease)
        _report(outcome, {"requested_attempt": attempt}, f"attempt {attempt}", as_json)
        return
    if schedule is None or schedule < 1:
        raise _usage("give --schedule (at least 1) with --job-name or --at, or --attempt alone.")
    if (job_name is None) == (at is None):
        raise _usage("give exactly one of --job-name and --at.")
    try:
        tick = tick_from_job_name(schedule, job_name) if job_name is not None else parse_utc(at or "")
    except InvalidInput as exc:
        raise _usage(exc.message) from None
    except ValueError:
        raise _usage(f"--at {(at or '')[:40]!r} is not an ISO 8601 time with an offset or Z.") from None
    logging.getLogger("tickwarden").setLevel(logging.INFO)
    with Database(min_size=1, max_size=4, application_name="tickwarden-tick") as db:
        if record_only:
            outcome = record_tick(db, schedule, tick, clock.now())
        else:
            outcome = run_tick(db, schedule, tick, clock, replica_id("tick"), lease_seconds=lease)
    _report(outcome, {"schedule": schedule, "tick": isoformat_z(tick)}, f"schedule {schedule}", as_json)


def _report(outcome: TickOutcome, subject: dict[str, object], label: str, as_json: bool) -> None:
    finished = outcome.finished
    if as_json:
        print_json({**subject, "status": outcome.status,
                    "reason": outcome.reason, "run": outcome.run_id,
                    "attempt": outcome.attempt.id if outcome.attempt else None,
                    "run_status": finished.run_status if finished else None})
        return
    line = f"{label}: {outcome.reason}"
    if outcome.attempt is not None:
        line += f"; attempt {outcome.attempt.id}: " + (f"run {finished.run_status}" if finished else "released")
    console.print(line)
