"""`tickwarden checkin` and `checkin-url`: an external workflow's reports, and its ping URL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tickwarden.cli import app
from tickwarden.cli.catalog_cmd import AsJson, Ref, _db
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock, isoformat_z
from tickwarden.errors import InvalidInput, UsageError


@app.command("checkin")
def checkin_command(
    ref: Ref,
    status: Annotated[str, typer.Argument(metavar="start|success|fail", help="What the job reports.")],
    tick: Annotated[str | None, typer.Option("--tick", help="The tick reported on (ISO 8601); "
                                             "default: the newest tick due now.")] = None,
    exit_code: Annotated[int | None, typer.Option("--exit-code", help="The job's exit code.")] = None,
    log_file: Annotated[Path | None, typer.Option("--log-file", help="A log to attach (its tail is kept, "
                                                  "sanitized).")] = None,
    as_json: AsJson = False,
) -> None:
    """Report an external workflow's start, success or failure, as its ping URL does."""
    from tickwarden import catalog, checkins

    try:
        tenant, workflow = catalog.parse_ref(ref)
    except InvalidInput as exc:
        raise UsageError(exc.message) from None
    log = _read_log(log_file) if log_file is not None else None
    report = checkins.parse_report(status, tick=tick, exit_code=exit_code, log=log)
    with _db() as db:
        recorded = checkins.report_by_name(db, tenant, workflow, report, WallClock().now())
    if as_json:
        print_json(recorded.as_dict())
        return
    what = "recorded" if recorded.changed else "already recorded"
    console.print(f"{recorded.tenant}/{recorded.workflow} tick {isoformat_z(recorded.run.scheduled_for)}: "
                  f"{status} {what} (run {recorded.run.id} is {recorded.run.status})")


@app.command("checkin-url")
def checkin_url_command(
    ref: Ref,
    rotate: Annotated[bool, typer.Option("--rotate", help="Replace the existing URL; the old one stops working.")]
    = False,
    base_url: Annotated[str, typer.Option("--base-url", help="Where `tickwarden serve` is reached.")]
    = "http://127.0.0.1:8080",
    as_json: AsJson = False,
) -> None:
    """Issue an external workflow's ping URL; it is shown once (only its hash is stored)."""
    from tickwarden import catalog, checkins

    try:
        tenant, workflow = catalog.parse_ref(ref)
    except InvalidInput as exc:
        raise UsageError(exc.message) from None
    if not base_url.startswith(("http://", "https://")):
        raise UsageError("The base URL must start with http:// or https://.")
    with _db() as db:
        issued = checkins.issue_key(db, tenant, workflow, WallClock().now(), rotate=rotate)
    url = base_url.rstrip("/") + issued.path
    if as_json:
        print_json({"url": url, "key": issued.key, "created_at": isoformat_z(issued.created_at),
                    "replaced": issued.replaced})
        return
    console.print(url)
    console.print(f"POST {url}/start, {url}/success or {url}/fail; keep it secret, it is not shown again.",
                  style="dim")


def _read_log(path: Path) -> str:
    """Return the tail of a log file that fits a report (a long log is cut, never refused)."""
    from tickwarden import checkins

    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - checkins.MAX_LOG_BYTES))
            data = handle.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such log file.") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({type(exc).__name__}).") from None
    text = data.decode("utf-8", errors="replace").replace("\x00", "")
    # Replacement characters (for bytes that are not UTF-8, or a character the cut split)
    # may make the text longer than what was read: keep the tail that fits, whole characters only.
    return text.encode("utf-8")[-checkins.MAX_LOG_BYTES:].decode("utf-8", errors="ignore")
