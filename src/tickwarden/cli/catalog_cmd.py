"""`tickwarden apply`, `run-now`, `pause`, `resume`, `runs` and `workflows`: the control plane on the command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json, print_table, status
from tickwarden.clock import WallClock, isoformat_z
from tickwarden.errors import InvalidInput, NotFound, UsageError

if TYPE_CHECKING:
    from tickwarden.db import Database
    from tickwarden.models import Attempt, Run

Ref = Annotated[str, typer.Argument(metavar="TENANT/WORKFLOW", help="The workflow, e.g. acme/nightly.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _db() -> Database:
    """Open the database, bringing its schema up to date first (apply is often the first command run)."""
    from tickwarden.db import Database

    db = Database(min_size=1, max_size=2)
    db.migrate(WallClock().now())
    return db


@app.command("apply")
def apply_command(
    path: Annotated[Path, typer.Argument(metavar="FILE.yaml", help="A workflow file.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would change and change nothing.")] = False,
    as_json: AsJson = False,
) -> None:
    """Create or update the tenants, users, environments, channels and workflows of a file."""
    from tickwarden import catalog

    now = WallClock().now()
    # Validate before connecting: a bad file is reported even when no database is reachable.
    from tickwarden.workflow_file import load_file

    load_file(path, now)
    with _db() as db:
        report = catalog.apply_file(db, path, now, dry_run=dry_run)
    for warning in report.warnings:
        print(f"tickwarden: warning: {warning}", file=sys.stderr)
    if as_json:
        print_json(report.as_dict())
        return
    if dry_run:
        for change in report.changes:
            console.print(f"{'+' if change['change'] == 'created' else '~'} {change['kind']:<12} {change['name']}")
        console.print(f"dry run of {report.source}: would create {report.created}, update {report.updated}, "
                      f"leave {report.unchanged} unchanged; nothing was changed")
        return
    for kind, counts in report.counts.items():
        if any(counts.values()):
            parts = [f"{n} {change}" for change, n in counts.items() if n]
            console.print(f"{kind + 's':<13} {', '.join(parts)}")
    console.print(f"applied {report.source}: {report.created} created, {report.updated} updated, "
                  f"{report.unchanged} unchanged")


@app.command("run-now")
def run_now_command(
    ref: Ref,
    requested_by: Annotated[str | None, typer.Option("--by", help="Who asks for the run (recorded).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the verdict; exit 0 only if the run succeeded.")] = False,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="With --wait: give up after this many seconds (exit 3).", min=0)
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Queue a manual run of a workflow; a worker runs it like any tick."""
    from tickwarden import catalog

    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        run = catalog.run_now(db, tenant, workflow, WallClock().now(), requested_by=requested_by)
        if not wait:
            if as_json:
                print_json(run_json(run))
            else:
                console.print(f"queued manual run {run.id} of {tenant}/{workflow} "
                              f"(deadline {isoformat_z(run.deadline_at)})")
            return
        if not as_json:
            console.print(f"queued manual run {run.id} of {tenant}/{workflow}; waiting for its verdict …")
        run = _wait_for_verdict(db, run, timeout)
    if as_json:
        print_json(run_json(run))
    elif run.terminal:
        console.print(Text.assemble(f"run {run.id} ", status(run.status),
                                    f" after {run.attempts_count} attempt(s)" + (f": {run.error}" if run.error else "")))
    if not run.terminal:
        print(f"tickwarden: run {run.id} is still {run.status} after {timeout:g} s.", file=sys.stderr)
        raise typer.Exit(3)
    if run.status != "succeeded":
        raise typer.Exit(1)


def _wait_for_verdict(db: Database, run: Run, timeout: float | None) -> Run:
    """Poll the run until it has a verdict (or `timeout` seconds pass); the deadline bounds it anyway."""
    import time

    give_up = time.monotonic() + timeout if timeout is not None else None
    while not run.terminal:
        if give_up is not None and time.monotonic() >= give_up:
            break
        time.sleep(0.5)
        with db.transaction() as store:
            found = store.ledger.get_run(run.id, run.scheduled_for)
        run = found or run
    return run


@app.command("cancel")
def cancel_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The run to cancel.")],
    by: Annotated[str | None, typer.Option("--by", help="Who cancels it (recorded).")] = None,
    as_json: AsJson = False,
) -> None:
    """Cancel a run in progress: its attempt is stopped, it is not retried and counts as no failure."""
    from tickwarden import catalog

    from tickwarden.cli.alerts_cmd import _actor

    try:
        wanted = _run_id(run_id)
    except InvalidInput as exc:
        raise UsageError(exc.message) from None
    with _db() as db:
        run = catalog.cancel(db, wanted, WallClock().now(), _actor(by))
    if as_json:
        print_json(run_json(run))
    else:
        console.print(f"run {run.id} is cancelled (by {run.cancelled_by})")


@app.command("pause")
def pause_command(
    ref: Ref,
    by: Annotated[str | None, typer.Option("--by", help="Who pauses it (told in an open alert's thread).")] = None,
) -> None:
    """Pause a workflow's schedule: no new ticks until it is resumed; an open alert's thread is told."""
    from tickwarden import catalog

    from tickwarden.cli.alerts_cmd import _actor

    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        catalog.pause(db, tenant, workflow, WallClock().now(), actor=_actor(by))
    console.print(f"{tenant}/{workflow} is paused")


@app.command("archive")
def archive_command(ref: Ref) -> None:
    """Archive a workflow: no more ticks, its history stays readable; apply its file again to restore it."""
    from tickwarden import catalog

    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        catalog.archive(db, tenant, workflow, WallClock().now())
    console.print(f"{tenant}/{workflow} is archived")


@app.command("resume")
def resume_command(ref: Ref) -> None:
    """Resume a paused schedule: it ticks again from its next fire time."""
    from tickwarden import catalog

    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        catalog.resume(db, tenant, workflow, WallClock().now())
    console.print(f"{tenant}/{workflow} is active")


def run_duration(run: Run | Attempt) -> int | None:
    """Return how long a run (or attempt) ran, in whole seconds, once it started and finished."""
    if run.started_at is None or run.finished_at is None:
        return None
    return max(0, int((run.finished_at - run.started_at).total_seconds()))


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "scheduled_for": isoformat_z(run.scheduled_for),
        "manual": run.manual,
        "status": run.status,
        "recovered": run.recovered,
        "attempts": run.attempts_count,
        "started_at": isoformat_z(run.started_at),
        "finished_at": isoformat_z(run.finished_at),
        "duration_seconds": run_duration(run),
        "error": run.error,
        "error_category": run.error_category,
        "failed_step": run.failed_step,
        "deadline_at": isoformat_z(run.deadline_at),
        "requested_by": run.requested_by,
        "rows": run.rows,
        "cancelled_by": run.cancelled_by,
    }


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    return {
        "id": attempt.id,
        "number": attempt.number,
        "status": attempt.status,
        "worker_id": attempt.worker_id,
        "queued_at": isoformat_z(attempt.queued_at),
        "started_at": isoformat_z(attempt.started_at),
        "finished_at": isoformat_z(attempt.finished_at),
        "duration_seconds": run_duration(attempt),
        "retryable": attempt.retryable,
        "error_category": attempt.error_category,
        "error": attempt.error,
        "failed_step": attempt.failed_step,
        "log_tail": attempt.log_tail,
    }


def _run_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"Run id {text!r} is not a number.") from None
    if value < 1:
        raise InvalidInput(f"Run id {text!r} is not valid: ids start at 1.")
    return value


def _run_with_attempts(run_id: int) -> tuple[str, Run, list[Attempt]]:
    with _db() as db, db.transaction() as store:
        run = store.ledger.get_run(run_id)
        if run is None:
            raise NotFound(f"There is no run {run_id}.")
        tenant = store.catalog.get_tenant(run.tenant_id)
        workflow = store.catalog.get_workflow(run.workflow_id)
        ref = f"{tenant.name if tenant else run.tenant_id}/{workflow.name if workflow else run.workflow_id}"
        return ref, run, store.ledger.list_attempts(run_id, run.scheduled_for)


@app.command("runs")
def runs_command(
    ref: Annotated[str, typer.Argument(metavar="TENANT/WORKFLOW | show",
                                       help="The workflow, e.g. acme/nightly; or `show` and a run id.")],
    run_id: Annotated[str | None, typer.Argument(metavar="RUN_ID", help="With `show`: the run to show.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many runs, newest first.")] = 20,
    as_json: AsJson = False,
) -> None:
    """List a workflow's runs, newest first; `runs show RUN_ID` shows one run and its attempts."""
    from tickwarden import catalog
    from tickwarden.messages import format_duration

    # A workflow reference always holds a slash, so `show` cannot name one.
    if ref == "show":
        if run_id is None:
            raise typer.BadParameter("`runs show` needs a run id.", param_hint="RUN_ID")
        show_run(_run_id(run_id), as_json)
        return
    if run_id is not None:
        raise typer.BadParameter(f"unexpected extra argument {run_id!r}.", param_hint="RUN_ID")
    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        runs = catalog.list_runs(db, tenant, workflow, limit=limit)
    if as_json:
        print_json([run_json(run) for run in runs])
        return
    print_table(
        ("id", "scheduled_for", "manual", "status", "attempts", "duration", "rows", "finished_at", "error"),
        [(str(run.id), isoformat_z(run.scheduled_for), "yes" if run.manual else "",
          status(run.status + (" (recovered)" if run.recovered else "")), str(run.attempts_count),
          format_duration(run_duration(run)) if run_duration(run) is not None else "",
          "" if run.rows is None else str(run.rows),
          isoformat_z(run.finished_at) or "", run.error or "") for run in runs],
        no_wrap=("id", "scheduled_for", "status", "finished_at"),
    )


def show_run(run_id: int, as_json: bool) -> None:
    """Print one run and its attempts."""
    from tickwarden.messages import format_duration

    ref, found, attempts = _run_with_attempts(run_id)
    data = {"workflow": ref, **run_json(found), "attempts": [attempt_json(a) for a in attempts]}
    if as_json:
        print_json(data)
        return
    print_table(("field", "value"), [(key.replace("_", " "), status(value) if key == "status" else value)
                                     for key, value in data.items() if key != "attempts" and value is not None],
                title=f"run {found.id}: {ref}")
    print_table(("#", "status", "worker", "started", "duration", "error"),
                [(str(a["number"]), status(a["status"]), a["worker_id"], a["started_at"],
                  format_duration(a["duration_seconds"]) if a["duration_seconds"] is not None else "", a["error"])
                 for a in data["attempts"]], title="attempts")


@app.command("logs")
def logs_command(run: Annotated[str, typer.Argument(metavar="RUN_ID", help="The run's id.")],
                 as_json: AsJson = False) -> None:
    """Print the log tail of every attempt of a run (sanitized when it was recorded)."""
    _, found, attempts = _run_with_attempts(_run_id(run))
    if as_json:
        print_json([{"attempt": a.number, "status": a.status, "log_tail": a.log_tail} for a in attempts])
        return
    if not attempts:
        print(f"run {found.id} has no attempts yet")
    for attempt in attempts:
        print(f"--- attempt {attempt.number} ({attempt.status}) ---")
        print(attempt.log_tail or "(no log)")


@app.command("workflows")
def workflows_command(
    tenant: Annotated[str | None, typer.Argument(help="Only this tenant's workflows.")] = None,
    as_json: AsJson = False,
) -> None:
    """List workflows with their schedule and newest run."""
    from tickwarden import catalog

    with _db() as db:
        summaries = catalog.list_workflows(db, tenant)
    # The workflow file's names (as the API's), plus what the ledger adds.
    rows = [
        {
            "tenant": s.tenant,
            "name": s.workflow,
            "description": s.description,
            "environment": s.environment,
            "publisher": s.publisher,
            "schedule": None if s.cron is None else {"cron": s.cron, "timezone": s.timezone,
                                                     "status": s.schedule_status},
            "timeout_seconds": s.timeout_seconds,
            "monitoring": s.monitoring_enabled,
            "shadow": s.shadow,
            "archived": s.archived_at is not None,
            "cadence_seconds": s.cadence_seconds,
            "last_scheduled_for": isoformat_z(s.last_scheduled_for),
            "last_status": s.last_status,
        }
        for s in summaries
    ]
    if as_json:
        print_json(rows)
        return
    print_table(
        ("workflow", "cron", "timezone", "status", "monitoring", "environment", "last run"),
        [(f"{s.tenant}/{s.workflow}", s.cron, s.timezone, status("archived" if s.archived_at else s.schedule_status),
          "on" if s.monitoring_enabled else "off", s.environment,
          f"{s.last_status} ({isoformat_z(s.last_scheduled_for)})" if s.last_status else "") for s in summaries],
        no_wrap=("workflow",),
    )
