"""`tickwarden apply`, `run-now`, `pause`, `resume`, `runs` and `workflows`: the control plane on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from tickwarden import catalog
from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock, isoformat_z
from tickwarden.db import Database
from tickwarden.models import Run

Ref = Annotated[str, typer.Argument(metavar="TENANT/WORKFLOW", help="The workflow, e.g. acme/nightly.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _db() -> Database:
    """Open the database, bringing its schema up to date first (apply is often the first command run)."""
    db = Database(min_size=1, max_size=2)
    db.migrate(WallClock().now())
    return db


@app.command("apply")
def apply_command(
    path: Annotated[Path, typer.Argument(metavar="FILE.yaml", help="A workflow file.")],
    as_json: AsJson = False,
) -> None:
    """Create or update the tenants, users, environments, channels and workflows of a file."""
    now = WallClock().now()
    # Validate before connecting: a bad file is reported even when no database is reachable.
    from tickwarden.workflow_file import load_file

    load_file(path, now)
    with _db() as db:
        report = catalog.apply_file(db, path, now)
    if as_json:
        print_json(report.as_dict())
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
    as_json: AsJson = False,
) -> None:
    """Queue a manual run of a workflow; a worker runs it like any tick."""
    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        run = catalog.run_now(db, tenant, workflow, WallClock().now(), requested_by=requested_by)
    if as_json:
        print_json(run_json(run))
    else:
        console.print(f"queued manual run {run.id} of {tenant}/{workflow} (deadline {isoformat_z(run.deadline_at)})")


@app.command("pause")
def pause_command(ref: Ref) -> None:
    """Pause a workflow's schedule: no new ticks until it is resumed."""
    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        catalog.pause(db, tenant, workflow, WallClock().now())
    console.print(f"{tenant}/{workflow} is paused")


@app.command("archive")
def archive_command(ref: Ref) -> None:
    """Archive a workflow: no more ticks, its history stays readable; apply its file again to restore it."""
    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        catalog.archive(db, tenant, workflow, WallClock().now())
    console.print(f"{tenant}/{workflow} is archived")


@app.command("resume")
def resume_command(ref: Ref) -> None:
    """Resume a paused schedule: it ticks again from its next fire time."""
    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        catalog.resume(db, tenant, workflow, WallClock().now())
    console.print(f"{tenant}/{workflow} is active")


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "scheduled_for": isoformat_z(run.scheduled_for),
        "manual": run.manual,
        "status": run.status,
        "recovered": run.recovered,
        "attempts": run.attempts_count,
        "finished_at": isoformat_z(run.finished_at),
        "error": run.error,
        "error_category": run.error_category,
        "failed_step": run.failed_step,
        "deadline_at": isoformat_z(run.deadline_at),
        "requested_by": run.requested_by,
    }


@app.command("runs")
def runs_command(
    ref: Ref,
    limit: Annotated[int, typer.Option("--limit", help="How many runs, newest first.")] = 20,
    as_json: AsJson = False,
) -> None:
    """List a workflow's runs, newest first: one row per tick or manual run."""
    tenant, workflow = catalog.parse_ref(ref)
    with _db() as db:
        runs = catalog.list_runs(db, tenant, workflow, limit=limit)
    if as_json:
        print_json([run_json(run) for run in runs])
        return
    table = Table("scheduled_for", "manual", "status", "recovered", "attempts", "finished_at", "error")
    for run in runs:
        table.add_row(isoformat_z(run.scheduled_for), "yes" if run.manual else "", run.status,
                      "yes" if run.recovered else "", str(run.attempts_count), isoformat_z(run.finished_at) or "",
                      run.error or "")
    console.print(table)


@app.command("workflows")
def workflows_command(
    tenant: Annotated[str | None, typer.Argument(help="Only this tenant's workflows.")] = None,
    as_json: AsJson = False,
) -> None:
    """List workflows with their schedule and newest run."""
    with _db() as db:
        summaries = catalog.list_workflows(db, tenant)
    rows = [
        {
            "tenant": s.tenant,
            "workflow": s.workflow,
            "cron": s.cron,
            "timezone": s.timezone,
            "status": "archived" if s.archived_at else s.schedule_status,
            "cadence_seconds": s.cadence_seconds,
            "monitoring": s.monitoring_enabled,
            "environment": s.environment,
            "publisher": s.publisher,
            "last_scheduled_for": isoformat_z(s.last_scheduled_for),
            "last_status": s.last_status,
        }
        for s in summaries
    ]
    if as_json:
        print_json(rows)
        return
    table = Table("workflow", "cron", "timezone", "status", "monitoring", "environment", "last run")
    for r in rows:
        last = f"{r['last_status']} ({r['last_scheduled_for']})" if r["last_status"] else ""
        table.add_row(f"{r['tenant']}/{r['workflow']}", r["cron"] or "", r["timezone"] or "", r["status"] or "",
                      "on" if r["monitoring"] else "off", r["environment"] or "", last)
    console.print(table)
