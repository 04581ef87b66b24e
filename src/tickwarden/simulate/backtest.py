"""Backtesting: replay recorded history under another policy and compare what it would have sent.

History is a list of attempts — workflow, cron, tick, attempt number, start, end,
outcome, error — read from the ledger or from a CSV/JSONL export. The replay runs
the same simulated pipeline as `simulate`, with outcomes taken from the record:

1. Attempt n of a tick ends as the record's attempt n did, after the same duration.
2. A policy with more retries than the record holds re-uses the tick's last recorded
   outcome for the extra attempts: a retry is assumed to meet the same fate as the
   last one that really ran. (A policy with fewer retries simply stops earlier.)
3. A tick of the recorded period with no attempt at all is replayed as a tick the
   trigger never fired, so it becomes `missed` exactly as it did (or would have).
4. Ticks are evaluated from the first recorded tick to the last recorded finish.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tickwarden.categories import categorize
from tickwarden.clock import isoformat_z, parse_utc
from tickwarden.errors import InvalidInput
from tickwarden.models import Attempt, AttemptOutcome
from tickwarden.sanitize import sanitize_error
from tickwarden.simulate.engine import Plan, Simulation, SimulationOutcome
from tickwarden.simulate.policies import apply_message_rule, get_policy
from tickwarden.simulate.scenario import Scenario, WorkflowSpec
from tickwarden.simulate.simulation import SimulationRepository

FIELDS = ("workflow", "cron", "scheduled_for", "attempt", "started_at", "finished_at", "outcome")
OUTCOMES = {"succeeded", "failed", "lost", "crashed"}


@dataclass(frozen=True)
class RecordedAttempt:
    tenant: str
    workflow: str
    cron: str
    timezone: str
    scheduled_for: datetime
    attempt: int
    started_at: datetime
    finished_at: datetime
    outcome: str
    error: str | None
    retryable: bool = True

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.workflow}"


def read_history(path: str | Path) -> list[RecordedAttempt]:
    """Read a CSV or JSONL export of attempts; one clear sentence on the first bad record."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such history file.") from None
    rows: list[dict[str, Any]] = []
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                raise InvalidInput(f"{path.name}: line {number} is not valid JSON.") from None
            if not isinstance(item, dict):
                raise InvalidInput(f"{path.name}: line {number} is not a JSON object.")
            rows.append(item)
    elif path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    else:
        raise InvalidInput(f"{path.name}: history must be a .csv or .jsonl file.")
    return [_record(row, f"{path.name}: record {index}") for index, row in enumerate(rows, start=1)]


def _record(row: dict[str, Any], where: str) -> RecordedAttempt:
    missing = [name for name in FIELDS if not str(row.get(name) or "").strip()]
    if missing:
        raise InvalidInput(f"{where}: missing field {missing[0]!r}.")
    workflow = str(row["workflow"])
    tenant, _, name = workflow.partition("/")
    if not name:
        tenant, name = str(row.get("tenant") or ""), workflow
    if not tenant:
        raise InvalidInput(f"{where}: 'workflow' must be TENANT/WORKFLOW, or a 'tenant' field must be given.")
    outcome = str(row["outcome"]).strip().lower()
    if outcome not in OUTCOMES:
        raise InvalidInput(f"{where}: outcome {outcome!r} is not one of {', '.join(sorted(OUTCOMES))}.")
    try:
        scheduled_for = parse_utc(str(row["scheduled_for"]))
        started_at = parse_utc(str(row["started_at"]))
        finished_at = parse_utc(str(row["finished_at"]))
        attempt = int(row["attempt"])
    except (ValueError, TypeError):
        raise InvalidInput(f"{where}: times must be ISO 8601 with a timezone and 'attempt' a number.") from None
    if attempt < 1 or finished_at < started_at:
        raise InvalidInput(f"{where}: 'attempt' must be ≥ 1 and 'finished_at' not before 'started_at'.")
    retryable = str(row.get("retryable", "true")).strip().lower() not in ("false", "0", "no")
    return RecordedAttempt(
        tenant=tenant, workflow=name, cron=str(row["cron"]), timezone=str(row.get("timezone") or "UTC"),
        scheduled_for=scheduled_for, attempt=attempt, started_at=started_at, finished_at=finished_at,
        outcome=outcome, error=(str(row["error"]) if row.get("error") else None), retryable=retryable,
    )


class RecordedModel:
    """Outcomes of attempts as the history recorded them."""

    def __init__(self, history: list[RecordedAttempt]):
        self.by_tick: dict[tuple[str, datetime], list[RecordedAttempt]] = defaultdict(list)
        for record in history:
            self.by_tick[(record.key, record.scheduled_for)].append(record)
        for attempts in self.by_tick.values():
            attempts.sort(key=lambda r: r.attempt)
        self.durations: dict[str, float] = {}
        per_workflow: dict[str, list[float]] = defaultdict(list)
        for record in history:
            per_workflow[record.key].append((record.finished_at - record.started_at).total_seconds())
        for key, values in per_workflow.items():
            self.durations[key] = max(1.0, statistics.median(values))

    def plan(self, workflow: str, attempt: Attempt, scheduled_for: datetime, start: datetime) -> Plan:
        recorded = self.by_tick.get((workflow, scheduled_for))
        if not recorded:
            # a manual run or a tick outside the record: it behaves like the workflow's usual success
            return Plan(start + timedelta(seconds=self.durations.get(workflow, 60)), AttemptOutcome(status="succeeded"))
        record = recorded[min(attempt.number, len(recorded)) - 1]
        at = start + (record.finished_at - record.started_at)
        if record.outcome == "succeeded":
            return Plan(at, AttemptOutcome(status="succeeded"))
        if record.outcome in ("lost", "crashed"):
            return Plan(at, None)
        error = record.error or "failed"
        return Plan(
            at,
            AttemptOutcome(
                status="failed", error_category=categorize(error), error=sanitize_error(error), retryable=record.retryable
            ),
        )

    def has_tick(self, workflow: str, tick: datetime) -> bool:
        return (workflow, tick) in self.by_tick


def history_from_ledger(db: Any) -> list[RecordedAttempt]:
    """Export the scheduled attempts of the ledger as history records."""
    with db.transaction() as store:
        rows = SimulationRepository(store.conn).history()
    return [
        RecordedAttempt(
            tenant=row["tenant"], workflow=row["workflow"], cron=row["cron"], timezone=row["timezone"],
            scheduled_for=row["scheduled_for"], attempt=row["number"], started_at=row["started_at"],
            finished_at=row["finished_at"], outcome=("crashed" if row["status"] == "lost" else row["status"]),
            error=row["error"], retryable=row["retryable"] is not False,
        )
        for row in rows
    ]


def scenario_from_history(history: list[RecordedAttempt], name: str) -> Scenario:
    if not history:
        raise InvalidInput("The history holds no attempts to replay.")
    workflows: dict[str, WorkflowSpec] = {}
    durations: dict[str, list[float]] = defaultdict(list)
    for record in history:
        durations[record.key].append((record.finished_at - record.started_at).total_seconds())
        existing = workflows.get(record.key)
        if existing and (existing.cron, existing.timezone) != (record.cron, record.timezone):
            raise InvalidInput(f"Workflow {record.key!r} appears with two schedules; backtest one schedule at a time.")
        workflows[record.key] = WorkflowSpec(
            tenant=record.tenant, name=record.workflow, cron=record.cron, timezone=record.timezone,
            duration=max(1.0, statistics.median(durations[record.key])),
        )
    start = min(r.scheduled_for for r in history) - timedelta(seconds=1)
    # long enough for the last outcome to be polled, evaluated and notified
    end = max(r.finished_at for r in history) + timedelta(seconds=90)
    from tickwarden.simulate.scenario import parse_scenario

    return parse_scenario(
        {
            "name": name,
            "start": isoformat_z(start),
            "end": isoformat_z(end),
            "tenants": sorted({r.tenant for r in history}),
            "workflows": [spec.model_dump() for spec in workflows.values()],
        },
        source=name,
    )


def replay(history: list[RecordedAttempt], policy: str = "tickwarden", overrides: dict[str, Any] | None = None,
           name: str = "backtest", url: str | None = None) -> SimulationOutcome:
    """Replay `history` under a named policy, or tickwarden's with `overrides` on every workflow."""
    scenario = scenario_from_history(history, name)
    model = RecordedModel(history)
    chosen = get_policy(policy)

    def suppress(workflow: str, tick: datetime) -> bool:
        # a tick of the recorded period that has no record never ran
        return not model.has_tick(workflow, tick)

    kwargs: dict[str, Any] = {"url": url, "model_factory": lambda scenario, timeouts: model, "suppress": suppress}
    if chosen.overrides:
        kwargs.update(overrides=chosen.overrides, replace_policy=chosen.replace_policy)
    elif overrides:
        kwargs.update(overrides=overrides)
    return apply_message_rule(Simulation(scenario, **kwargs).run(), chosen)


def compare(current: SimulationOutcome, proposed: SimulationOutcome) -> dict[str, Any]:
    """Summarise what each replay would have sent, and per workflow how they differ."""

    def totals(outcome: SimulationOutcome) -> dict[str, Any]:
        threads = {(n["channel"], n["thread"]) for n in outcome.notifications}
        return {
            "alerts": len(outcome.alerts),
            "messages": len(outcome.notifications),
            "threads": len(threads),
            "failed_ticks": sum(r["status"] in ("failed", "missed") for r in outcome.runs),
        }

    per_workflow: dict[str, dict[str, int]] = defaultdict(lambda: {"current_alerts": 0, "proposed_alerts": 0,
                                                                   "current_messages": 0, "proposed_messages": 0})
    for label, outcome in (("current", current), ("proposed", proposed)):
        for alert in outcome.alerts:
            per_workflow[f"{alert['tenant']}/{alert['workflow']}"][f"{label}_alerts"] += 1
        for message in outcome.notifications:
            per_workflow[f"{message['tenant']}/{message['workflow']}"][f"{label}_messages"] += 1
    changed = {key: value for key, value in sorted(per_workflow.items())
               if value["current_alerts"] != value["proposed_alerts"] or value["current_messages"] != value["proposed_messages"]}
    return {"current": totals(current), "proposed": totals(proposed), "changed_workflows": changed}
