"""`tickwarden profile`: the cadence profile a cron expression gets."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock, isoformat_z
from tickwarden.errors import InvalidPolicy


def parse_settings(settings: list[str]) -> dict[str, Any]:
    """Turn `key=value` pairs into an overrides mapping (values parsed as numbers where they look like one)."""
    raw: dict[str, Any] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidPolicy(f"Override {item!r} is not of the form key=value.")
        text = value.strip()
        if "," in text:  # a list, such as backoff_seconds=60,300,900
            raw[key.strip()] = [_number(part.strip()) for part in text.split(",")]
            continue
        parsed: Any = text
        for convert in (int, float):
            try:
                parsed = convert(text)
                break
            except ValueError:
                continue
        raw[key.strip()] = parsed
    return raw


def _retries_text(retries: int, backoffs: tuple[int, ...]) -> str:
    from tickwarden.retries import PATIENT_CATEGORIES

    if not retries:
        return "0 (the next tick is the retry)"
    waits = ", ".join(f"{b} s" for b in backoffs)
    patient = ", ".join(sorted(PATIENT_CATEGORIES))
    return f"{retries}, after {waits} when the fault can heal ({patient}); any other error at once"


def _number(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            continue
    return text


@app.command("profile")
def profile_command(
    cron: Annotated[str, typer.Argument(help="A five-field cron expression, e.g. '*/5 * * * *'.")],
    tz: Annotated[str, typer.Option("--tz", help="IANA timezone the expression is evaluated in.")] = "UTC",
    set_: Annotated[
        list[str], typer.Option("--set", help="Override a field, e.g. --set retries=1 (repeatable).")
    ] = [],  # noqa: B006 - typer needs a literal default
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the retry, alert and escalation profile derived from a schedule's cadence."""
    from rich.table import Table
    from tickwarden.cadence import cadence_of, parse_schedule
    from tickwarden.profile import derive_profile, parse_overrides

    now = WallClock().now()
    schedule = parse_schedule(cron, tz)
    cadence = cadence_of(schedule, now)
    overrides = parse_overrides(parse_settings(set_))
    profile = derive_profile(cadence.interval_seconds, overrides)
    fires = []
    for fire in schedule.fire_times(now):
        fires.append(fire)
        if len(fires) == 5:
            break
    data = {
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "interval_seconds": cadence.interval_seconds,
        "regular": cadence.regular,
        "cadence": cadence.summary,
        **profile.as_dict(),
        "escalation_after_seconds": int(profile.escalation_multiplier * cadence.interval_seconds),
        "next_fire_times": [isoformat_z(f) for f in fires],
    }
    if as_json:
        print_json(data)
        return
    table = Table(title=f"profile for '{schedule.cron}' in {schedule.timezone}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("cadence", cadence.summary)
    table.add_row("band", profile.band)
    table.add_row("retries per tick", _retries_text(profile.retries, profile.backoffs()))
    table.add_row("alert after", f"{profile.alert_after} consecutive confirmed failure(s)")
    table.add_row("first severity", profile.first_severity)
    table.add_row(
        "escalation",
        f"critical after {profile.escalation_multiplier:g} × cadence ({data['escalation_after_seconds']} s) "
        f"or at {profile.escalate_after} consecutive failures",
    )
    table.add_row(
        "failure rate",
        f"warning when ≥ {profile.rate_threshold:.0%} of the last {profile.rate_window} ticks failed; "
        f"resolves under {profile.rate_resolve_below:.0%}" if profile.rate_window else "off",
    )
    table.add_row("overridden", ", ".join(profile.overridden) or "nothing")
    table.add_row("next fire times (UTC)", "\n".join(data["next_fire_times"]))
    console.print(table)


@app.command("profiles")
def profiles_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Print the default profile of every cadence band."""
    from rich.table import Table
    from tickwarden.profile import BANDS

    rows = [
        {
            "band": b.name,
            "max_interval_seconds": None if b.max_interval_seconds == float("inf") else b.max_interval_seconds,
            "retries": b.retries,
            "alert_after": b.alert_after,
            "first_severity": b.first_severity,
            "escalation_multiplier": b.escalation_multiplier,
            "escalate_after": b.escalate_after,
            "backoff_seconds": list(b.backoff_seconds),
            "rate_window": b.rate_window,
        }
        for b in BANDS
    ]
    if as_json:
        print_json(rows)
        return
    table = Table(title="default cadence profiles")
    for column in ("band", "interval up to", "retries", "backoff (s)", "alert after", "first severity", "escalate ×cadence",
                   "escalate at"):
        table.add_column(column)
    for b in BANDS:
        bound = "∞" if b.max_interval_seconds == float("inf") else f"{'≤' if b.inclusive else '<'} {b.max_interval_seconds / 3600:g} h"
        table.add_row(b.name, bound, str(b.retries), ", ".join(map(str, b.backoff_seconds)) or "—", str(b.alert_after), b.first_severity, f"{b.escalation_multiplier:g}", str(b.escalate_after))
    console.print(table)
