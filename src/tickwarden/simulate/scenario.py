"""Scenario files: the tenants, workflows, faults, manual runs, trigger outages and maintenance of a simulation.

The format is a fixed contract (DESIGN.md, "Scenario file"). Everything is checked
before anything runs: unknown keys, unknown workflows, times out of order, a bad
cron or zone, each reported as one sentence naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tickwarden.cadence import parse_schedule
from tickwarden.clock import ensure_utc
from tickwarden.errors import InvalidInput, TickwardenError
from tickwarden.maintenance import window_spec
from tickwarden.models import WindowSpec
from tickwarden.profile import parse_overrides

MAX_SPAN_DAYS = 62


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkflowSpec(_Strict):
    tenant: str
    name: str
    cron: str
    timezone: str = "UTC"
    duration: float = Field(default=60, gt=0, le=7 * 86400)
    policy: dict[str, Any] = Field(default_factory=dict)
    expect_rows: bool = False
    kind: Literal["managed", "external"] = "managed"  # external: no worker runs it; `checkins` report it

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.name}"


class FaultSpec(_Strict):
    workflow: str
    start: datetime
    end: datetime
    error: str = "simulated failure"
    retryable: bool = True
    mode: Literal["error", "crash", "empty"] = "error"


class ManualRunSpec(_Strict):
    workflow: str
    at: datetime


class OutageSpec(_Strict):
    workflow: str
    start: datetime
    end: datetime


class CancellationSpec(_Strict):
    workflow: str
    at: datetime
    by: str = Field(default="scenario", min_length=1, max_length=254)


class CheckinSpec(_Strict):
    workflow: str
    at: datetime
    status: Literal["start", "success", "fail"]
    tick: datetime | None = None  # default: the newest tick due at `at`


@dataclass(frozen=True)
class Checkin:
    workflow: str
    at: datetime
    status: str
    tick: datetime | None
class MaintenanceSpec(_Strict):
    """A maintenance window of one workflow or of a whole tenant: one-off, or recurring (cron + duration)."""

    workflow: str | None = None
    tenant: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    cron: str | None = None
    duration: int | str | None = None
    timezone: str | None = None


@dataclass(frozen=True)
class Maintenance:
    """A validated scenario window: `workflow` is TENANT/NAME, or None for every workflow of `tenant`."""

    tenant: str
    workflow: str | None
    spec: WindowSpec


class ScenarioSpec(_Strict):
    name: str | None = None
    start: datetime
    end: datetime
    tenants: list[str] = Field(min_length=1)
    workflows: list[WorkflowSpec] = Field(min_length=1)
    faults: list[FaultSpec] = Field(default_factory=list)
    manual_runs: list[ManualRunSpec] = Field(default_factory=list)
    trigger_outages: list[OutageSpec] = Field(default_factory=list)
    cancellations: list[CancellationSpec] = Field(default_factory=list)
    checkins: list[CheckinSpec] = Field(default_factory=list)
    maintenance: list[MaintenanceSpec] = Field(default_factory=list)

    @field_validator("start", "end")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("must carry a timezone, e.g. 2026-11-30T02:00:00Z")
        return ensure_utc(value)


@dataclass(frozen=True)
class Fault:
    workflow: str
    start: datetime
    end: datetime
    error: str
    retryable: bool
    mode: str


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: every time aware UTC, every reference resolved."""

    name: str
    start: datetime
    end: datetime
    tenants: tuple[str, ...]
    workflows: tuple[WorkflowSpec, ...]
    faults: tuple[Fault, ...] = ()
    manual_runs: tuple[tuple[str, datetime], ...] = ()
    trigger_outages: tuple[tuple[str, datetime, datetime], ...] = field(default=())
    cancellations: tuple[tuple[str, datetime, str], ...] = ()  # (workflow, at, by)
    checkins: tuple[Checkin, ...] = ()
    maintenance: tuple[Maintenance, ...] = ()

    def workflow(self, key: str) -> WorkflowSpec:
        for spec in self.workflows:
            if spec.key == key:
                return spec
        raise KeyError(key)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; raise InvalidInput with one sentence on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such scenario file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: cannot be read ({type(exc).__name__}).") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InvalidInput(f"{path.name}: not valid YAML{where}.") from None
    return parse_scenario(raw, source=path.name, default_name=path.stem)


def parse_scenario(raw: Any, *, source: str = "scenario", default_name: str = "scenario") -> Scenario:
    """Validate a scenario mapping."""
    if not isinstance(raw, dict):
        raise InvalidInput(f"{source}: a scenario is a mapping with start, end, tenants and workflows.")
    try:
        spec = ScenarioSpec.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInput(f"{source}: {_describe(exc)}") from None
    return _resolve(spec, source, default_name)


def _describe(exc: ValidationError) -> str:
    errors = exc.errors()
    # an unknown key usually explains the rest (a typo of a required one): name it first
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    where = _path(error["loc"])
    if error["type"] == "extra_forbidden":
        return f"unknown key {where!r}."
    if error["type"] == "missing":
        return f"missing key {where!r}."
    message = error["msg"]
    message = message.removeprefix("Value error, ")
    return f"{where}: {message[0].lower() + message[1:]}."


def _path(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "scenario"


def _resolve(spec: ScenarioSpec, source: str, default_name: str) -> Scenario:
    def fail(message: str) -> None:
        raise InvalidInput(f"{source}: {message}")

    if spec.end <= spec.start:
        fail("'end' must be after 'start'.")
    if (spec.end - spec.start).total_seconds() > MAX_SPAN_DAYS * 86400:
        fail(f"the scenario spans more than {MAX_SPAN_DAYS} days; split it.")
    tenants = tuple(spec.tenants)
    if len(set(tenants)) != len(tenants):
        fail("'tenants' lists a tenant twice.")
    for index, tenant in enumerate(tenants):
        if not isinstance(tenant, str) or not _slug(tenant):
            fail(f"tenants[{index}]: {tenant!r} is not a valid tenant name (lowercase letters, digits, - and _).")
    keys: set[str] = set()
    for index, wf in enumerate(spec.workflows):
        if wf.tenant not in tenants:
            fail(f"workflows[{index}].tenant: unknown tenant {wf.tenant!r}; declare it under 'tenants'.")
        if not _slug(wf.name):
            fail(f"workflows[{index}].name: {wf.name!r} is not a valid workflow name.")
        if wf.key in keys:
            fail(f"workflows[{index}]: workflow {wf.key!r} is declared twice.")
        keys.add(wf.key)
        try:
            parse_schedule(wf.cron, wf.timezone)
            parse_overrides(wf.policy)
        except TickwardenError as exc:
            fail(f"workflows[{index}]: {exc.message}")
    faults = []
    for index, fault in enumerate(spec.faults):
        if fault.workflow not in keys:
            fail(f"faults[{index}].workflow: unknown workflow {fault.workflow!r}.")
        start, end = _aware(fault.start, f"faults[{index}].start", fail), _aware(fault.end, f"faults[{index}].end", fail)
        if end <= start:
            fail(f"faults[{index}]: 'end' must be after 'start'.")
        faults.append(Fault(fault.workflow, start, end, fault.error, fault.retryable, fault.mode))
    manual = []
    for index, run in enumerate(spec.manual_runs):
        if run.workflow not in keys:
            fail(f"manual_runs[{index}].workflow: unknown workflow {run.workflow!r}.")
        at = _aware(run.at, f"manual_runs[{index}].at", fail)
        if not spec.start <= at <= spec.end:
            fail(f"manual_runs[{index}].at: {at.isoformat()} is outside the scenario's start and end.")
        manual.append((run.workflow, at))
    outages = []
    for index, outage in enumerate(spec.trigger_outages):
        if outage.workflow not in keys:
            fail(f"trigger_outages[{index}].workflow: unknown workflow {outage.workflow!r}.")
        start = _aware(outage.start, f"trigger_outages[{index}].start", fail)
        end = _aware(outage.end, f"trigger_outages[{index}].end", fail)
        if end <= start:
            fail(f"trigger_outages[{index}]: 'end' must be after 'start'.")
        outages.append((outage.workflow, start, end))
    return Scenario(
        name=spec.name or default_name,
        start=spec.start,
        end=spec.end,
        tenants=tenants,
        workflows=tuple(spec.workflows),
        faults=tuple(faults),
        manual_runs=tuple(sorted(manual, key=lambda m: (m[1], m[0]))),
        trigger_outages=tuple(outages),
        cancellations=_cancellations(spec, keys, fail),
        checkins=_checkins(spec, fail),
        maintenance=_maintenance(spec, tenants, keys, fail),
    )


def _checkins(spec: ScenarioSpec, fail: Any) -> tuple[Checkin, ...]:
    """Reports of external workflows: each names a declared external workflow, inside the scenario's span."""
    external = {wf.key for wf in spec.workflows if wf.kind == "external"}
    declared = {wf.key for wf in spec.workflows}
    found = []
    for index, checkin in enumerate(spec.checkins):
        if checkin.workflow not in declared:
            fail(f"checkins[{index}].workflow: unknown workflow {checkin.workflow!r}.")
        if checkin.workflow not in external:
            fail(f"checkins[{index}].workflow: {checkin.workflow!r} is not of kind external; only external "
                 "workflows report check-ins.")
        at = _aware(checkin.at, f"checkins[{index}].at", fail)
        if not spec.start <= at <= spec.end:
            fail(f"checkins[{index}].at: {at.isoformat()} is outside the scenario's start and end.")
        tick = _aware(checkin.tick, f"checkins[{index}].tick", fail) if checkin.tick is not None else None
        if tick is not None and tick > at:
            fail(f"checkins[{index}].tick: the tick is after the report's 'at'.")
        found.append(Checkin(checkin.workflow, at, checkin.status, tick))
    return tuple(sorted(found, key=lambda c: (c.at, c.workflow)))


def _maintenance(spec: ScenarioSpec, tenants: tuple[str, ...], keys: set[str], fail: Any
                 ) -> tuple[Maintenance, ...]:
    """Maintenance windows: each names a declared workflow or tenant (not both) and is a valid window."""
    found = []
    for index, item in enumerate(spec.maintenance):
        where = f"maintenance[{index}]"
        if (item.workflow is None) == (item.tenant is None):
            fail(f"{where}: name either a 'workflow' or a whole 'tenant'.")
        if item.workflow is not None and item.workflow not in keys:
            fail(f"{where}.workflow: unknown workflow {item.workflow!r}.")
        if item.tenant is not None and item.tenant not in tenants:
            fail(f"{where}.tenant: unknown tenant {item.tenant!r}.")
        for name in ("start", "end"):
            value = getattr(item, name)
            if value is not None:
                _aware(value, f"{where}.{name}", fail)
        try:
            window = window_spec(start=item.start, end=item.end, cron=item.cron, duration=item.duration,
                                 timezone=item.timezone)
        except InvalidInput as exc:
            fail(f"{where}: {exc.message.replace('The maintenance window', 'the window')}")
            raise
        tenant = item.tenant if item.tenant is not None else str(item.workflow).partition("/")[0]
        found.append(Maintenance(tenant, item.workflow, window))
    return tuple(found)


def _cancellations(spec: ScenarioSpec, keys: set[str], fail: Any) -> tuple[tuple[str, datetime, str], ...]:
    """An operator's cancels: each names a declared workflow, inside the scenario's span."""
    found = []
    for index, cancel in enumerate(spec.cancellations):
        if cancel.workflow not in keys:
            fail(f"cancellations[{index}].workflow: unknown workflow {cancel.workflow!r}.")
        at = _aware(cancel.at, f"cancellations[{index}].at", fail)
        if not spec.start <= at <= spec.end:
            fail(f"cancellations[{index}].at: {at.isoformat()} is outside the scenario's start and end.")
        found.append((cancel.workflow, at, cancel.by))
    return tuple(sorted(found, key=lambda c: (c[1], c[0])))


def _aware(value: datetime, where: str, fail: Any) -> datetime:
    if value.tzinfo is None:
        fail(f"{where}: the time must carry a timezone, e.g. 2026-11-30T02:00:00Z.")
    return ensure_utc(value)


def _slug(text: str) -> bool:
    import re

    return bool(re.match(r"^[a-z0-9][a-z0-9_.-]{0,62}$", text))
