"""What a simulation prints: the contract JSON, and a timeline like the seed's replay table."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tickwarden.cadence import cadence_of, parse_schedule
from tickwarden.clock import isoformat_z
from tickwarden.profile import derive_profile
from tickwarden.simulate.engine import SimulationOutcome


def to_json(outcome: SimulationOutcome) -> dict[str, Any]:
    """Return the `simulate --json` document (DESIGN.md, a fixed contract)."""
    return {
        "scenario": outcome.scenario.name,
        "runs": [
            {
                "tenant": r["tenant"],
                "workflow": r["workflow"],
                "scheduled_for": isoformat_z(r["scheduled_for"]),
                "manual": r["manual"],
                "status": r["status"],
                "recovered": r["recovered"],
                "attempts": r["attempts"],
                "finished_at": isoformat_z(r["finished_at"]),
                "error": r["error"],
                "rows": r["rows"],
            }
            for r in outcome.runs
        ],
        "alerts": [
            {
                "id": a["id"],
                "tenant": a["tenant"],
                "workflow": a["workflow"],
                "first_severity": a["first_severity"],
                "severity": a["severity"],
                "opened_at": isoformat_z(a["opened_at"]),
                "escalated_at": isoformat_z(a["escalated_at"]),
                "resolved_at": isoformat_z(a["resolved_at"]),
                "failure_count": a["failure_count"],
                "owner": a["owner"],
                "reason": a["reason"],
            }
            for a in outcome.alerts
        ],
        "notifications": [
            {
                "at": isoformat_z(n["at"]),
                "tenant": n["tenant"],
                "workflow": n["workflow"],
                "alert": n["alert"],
                "event": n["event"],
                "severity": n["severity"],
                "channel": n["channel"],
                "thread": n["thread"],
            }
            for n in outcome.notifications
        ],
    }


@dataclass(frozen=True)
class Line:
    at: datetime
    order: int
    workflow: str
    text: str
    quiet_failure: bool = False  # a confirmed failure that changed nothing visible


def _hhmm(at: datetime) -> str:
    return at.strftime("%H:%M:%S") if at.second else at.strftime("%H:%M")


def _thresholds(outcome: SimulationOutcome) -> dict[str, int]:
    found = {}
    for spec in outcome.scenario.workflows:
        cadence = cadence_of(parse_schedule(spec.cron, spec.timezone), outcome.scenario.start)
        overrides = outcome.extra.get("overrides", {})
        policy = dict(overrides) if outcome.extra.get("replace_policy") else {**spec.policy, **overrides}
        found[spec.name] = derive_profile(cadence.interval_seconds, policy).alert_after
    return found


def timeline(outcome: SimulationOutcome) -> list[Line]:
    """Build the story of the night from the ledger, oldest first."""
    lines: list[Line] = []
    runs_by_id = {r["id"]: r for r in outcome.runs}
    last_attempt = defaultdict(int)
    for a in outcome.attempts:
        last_attempt[a["run_id"]] = max(last_attempt[a["run_id"]], a["number"])
    thresholds = _thresholds(outcome)
    open_alert: dict[str, bool] = defaultdict(bool)
    alert_opened_at: dict[str, list[datetime]] = defaultdict(list)
    for e in outcome.alert_events:
        if e["kind"] == "opened":
            alert_opened_at[e["workflow"]].append(e["at"])

    streak: dict[str, int] = defaultdict(int)
    for a in outcome.attempts:
        wf = a["workflow"]
        run = runs_by_id[a["run_id"]]
        tick = "manual run" if a["manual"] else f"{_hhmm(a['scheduled_for'])} tick"
        if a["number"] > 1:
            lines.append(Line(a["queued_at"], 2 * a["number"], wf, f"{wf}: retry {a['number'] - 1} of the {tick} launches"))
        if a["finished_at"] is None or a["status"] == "cancelled":
            continue
        final = a["number"] == last_attempt[a["run_id"]] and run["status"] in ("succeeded", "failed")
        if a["status"] == "succeeded":
            if run["recovered"]:
                lines.append(Line(a["finished_at"], 2 * a["number"] + 1, wf, f"{wf}: retry succeeds → {tick} recovered, no alert"))
            elif streak[wf]:
                lines.append(Line(a["finished_at"], 2 * a["number"] + 1, wf, f"{wf}: {tick} succeeds"))
            streak[wf] = 0
            continue
        error = a["error"] or a["status"]
        if not final:
            lines.append(Line(a["finished_at"], 2 * a["number"] + 1, wf, f"{wf}: attempt {a['number']} of the {tick} fails ({error}) → pending retry"))
            continue
        streak[wf] += 1
        threshold = thresholds.get(wf, 1)
        if streak[wf] < threshold:
            note = f"{streak[wf]} of {threshold} → nothing"
        elif streak[wf] == threshold:
            note = f"{streak[wf]} of {threshold} confirmed → alert"
        else:
            note = f"confirmed failure {streak[wf]}, alert already open"
        lines.append(Line(a["finished_at"], 2 * a["number"] + 1, wf, f"{wf}: {tick} fails ({error}) — {note}", quiet_failure=streak[wf] > threshold))
    for r in outcome.runs:
        if r["status"] == "missed":
            lines.append(Line(r["finished_at"], 0, r["workflow"], f"{r['workflow']}: {_hhmm(r['scheduled_for'])} tick missed ({r['error'] or 'no outcome'})"))
    for e in outcome.alert_events:
        wf = e["workflow"]
        if e["kind"] == "opened":
            open_alert[wf] = True
            text = f"ALERT #{e['alert_id']} {wf}: opens {e['severity'].upper()}, owner {e['owner']}"
        elif e["kind"] == "escalated":
            text = f"ALERT #{e['alert_id']} {wf}: escalates to {e['severity'].upper()}"
        elif e["kind"] == "resolved":
            text = f"ALERT #{e['alert_id']} {wf}: resolves"
        elif e["kind"] == "reassigned":
            text = f"ALERT #{e['alert_id']} {wf}: reassigned to {e['owner']}"
        else:
            continue
        lines.append(Line(e["at"], 1000, wf, text))
    sent: dict[tuple[datetime, int, str], list[str]] = defaultdict(list)
    for n in outcome.notifications:
        sent[(n["at"], n["alert"], n["event"])].append(n["channel"])
    for (at, alert, event), channels in sent.items():
        lines.append(Line(at, 1001, "", f"   ✉ alert #{alert} {event}: 1 message each to {', '.join(sorted(channels))}"))
    lines.sort(key=lambda line: (line.at, line.order))
    return _compress(lines)


def _compress(lines: list[Line]) -> list[Line]:
    """Fold each workflow's runs of quiet repeated failures into one line at the first of them."""
    slots: list[Line | list[Line]] = []
    open_group: dict[str, int] = {}
    for line in lines:
        if line.quiet_failure:
            if line.workflow in open_group:
                group = slots[open_group[line.workflow]]
                assert isinstance(group, list)
                group.append(line)
            else:
                open_group[line.workflow] = len(slots)
                slots.append([line])
            continue
        open_group.pop(line.workflow, None)  # anything else said about the workflow ends its run
        slots.append(line)
    out: list[Line] = []
    for slot in slots:
        if isinstance(slot, Line):
            out.append(slot)
        elif len(slot) == 1:
            out.append(slot[0])
        else:
            first, last = slot[0], slot[-1]
            out.append(
                Line(first.at, 0, first.workflow,
                     f"{first.workflow}: fails {len(slot)} more times until {_hhmm(last.at)}"
                     " → the open alert's count grows, no message")
            )
    return out


def summary(outcome: SimulationOutcome) -> list[str]:
    threads = sorted({(n["channel"], n["thread"]) for n in outcome.notifications})
    per_alert = defaultdict(set)
    for n in outcome.notifications:
        per_alert[n["alert"]].add((n["channel"], n["thread"]))
    lines = [
        f"Runs: {len(outcome.runs)} ({sum(r['status'] == 'failed' for r in outcome.runs)} failed, "
        f"{sum(r['status'] == 'missed' for r in outcome.runs)} missed, "
        f"{sum(bool(r['recovered']) for r in outcome.runs)} recovered on retry)",
        f"Alerts: {len(outcome.alerts)}",
        f"Notifications sent: {len(outcome.notifications)} in {len(threads)} thread(s)",
    ]
    for alert in outcome.alerts:
        chans = ", ".join(f"{c} ({t})" for c, t in sorted(per_alert.get(alert["id"], ())))
        state = "resolved" if alert["resolved_at"] else "open"
        lines.append(
            f"  alert #{alert['id']} {alert['tenant']}/{alert['workflow']}: {alert['first_severity']}→{alert['severity']}, "
            f"{alert['failure_count']} failure(s), owner {alert['owner']}, {state}; threads: {chans or 'none'}"
        )
    return lines


def render_text(outcome: SimulationOutcome, *, limit: int | None = 400) -> str:
    lines = timeline(outcome)
    shown = lines if limit is None else lines[:limit]
    text = [f"== {outcome.scenario.name}"]
    text += [f"{_hhmm(line.at):>8}  {line.text}" for line in shown]
    if len(shown) < len(lines):
        text.append(f"… {len(lines) - len(shown)} more lines (use --json for everything)")
    text.append("")
    text += summary(outcome)
    return "\n".join(text)
