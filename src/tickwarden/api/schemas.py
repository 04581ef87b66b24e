"""Request and response bodies of the API, and the pagination cursor.

Request bodies forbid unknown fields and reject NUL characters (PostgreSQL text
cannot hold them), so bad input fails validation with a 4xx instead of reaching
the database.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from tickwarden.api.problems import Problem
from tickwarden.clock import isoformat_z, parse_utc
from tickwarden.workflow_file import OBJECT_NAME, ScheduleSpec, WorkflowDefinition, plain_data_problem

T = TypeVar("T")
DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("text must not contain NUL characters")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        # Anywhere in the body, keys included: no NUL, no lone surrogate, no hostile nesting.
        problem = plain_data_problem(data)
        if problem is not None:
            raise ValueError(problem)
        return data


class Page(BaseModel, Generic[T]):
    """One page of a list; pass `next_cursor` back as `cursor` for the next page."""

    items: list[T]
    next_cursor: str | None = None


def encode_cursor(values: list[Any]) -> str:
    plain = [isoformat_z(v) if isinstance(v, datetime) else v for v in values]
    return base64.urlsafe_b64encode(json.dumps(plain, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, shape: tuple[type, ...]) -> list[Any] | None:
    """Decode a cursor into values of the given types; 400 when it was not made by us."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
        if not isinstance(values, list) or len(values) != len(shape):
            raise ValueError
        decoded: list[Any] = []
        for value, kind in zip(values, shape, strict=True):
            if kind is datetime:
                decoded.append(parse_utc(value))
            elif kind is int:
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
                    raise ValueError
                decoded.append(value)
            else:
                if not isinstance(value, str) or "\x00" in value:
                    raise ValueError
                decoded.append(value)
        return decoded
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, AttributeError):
        raise Problem(400, "Bad request", "The cursor is not valid; pass the next_cursor of a previous page.") from None


# -- responses ------------------------------------------------------------------


class ProblemOut(BaseModel):
    """An RFC 7807 problem: every error the API returns."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str


def _problem(description: str) -> dict[str, Any]:
    schema = {"$ref": "#/components/schemas/ProblemOut"}
    return {"model": ProblemOut, "description": description, "content": {"application/problem+json": {"schema": schema}}}


# Declared on every router so the OpenAPI document shows the real error bodies.
PROBLEMS: dict[int | str, dict[str, Any]] = {
    400: _problem("Malformed JSON, a cursor not issued by the API, or a value the database cannot hold."),
    401: _problem("No token, or an unknown or revoked one."),
    404: _problem("No such object, or another tenant's."),
    413: _problem("The request body exceeds 64 KiB."),
    422: _problem("A field is missing, unknown, of the wrong type or out of range."),
}


class TenantOut(BaseModel):
    id: int
    name: str
    display_name: str
    shadow: bool


class ProfileOut(BaseModel):
    band: str
    interval_seconds: int
    retries: int
    alert_after: int
    first_severity: str
    escalation_multiplier: float
    escalate_after: int
    backoff_seconds: list[int] = []
    overridden: list[str]


class OutcomeOut(BaseModel):
    run_id: int
    scheduled_for: datetime
    status: str
    recovered: bool
    manual: bool


class WorkflowOut(BaseModel):
    """A workflow in the workflow file's own terms (the fields PUT takes back), then read-only facts."""

    tenant: str
    name: str
    description: str
    environment: str | None
    publisher: str | None
    schedule: ScheduleSpec | None
    timeout_seconds: int | None
    monitoring: bool
    policy: dict[str, Any] = Field(description="The profile overrides, as in the workflow file (`PolicyOverrides`).")
    shadow: bool
    archived: bool
    expect_rows: bool
    keep_outputs: bool = Field(default=False, description="Whether step outputs are stored.")
    steps: list[dict[str, Any]] = Field(description="The steps, as in the workflow file (`StepSpec`).")
    kind: str = Field(description="managed (tickwarden runs the steps) or external (check-ins report outcomes).")
    maintenance: list[dict[str, Any]] = Field(
        description="The workflow's own maintenance windows as its entry lists them (operators' windows not included).")
    # Read-only: computed or recorded by tickwarden; PUT does not take them.
    id: int
    cadence_seconds: int | None
    schedule_version: int | None
    published_at: datetime | None
    profile: ProfileOut | None
    next_fire_at: datetime | None = Field(None, description="The next tick; null when paused or unscheduled.")
    archived_at: datetime | None = Field(None, description="Archived (DELETE): no ticks, not listed; history kept.")
    created_at: datetime
    updated_at: datetime


class WorkflowDetailOut(WorkflowOut):
    recent: list[OutcomeOut]


class RunOut(BaseModel):
    id: int
    tenant: str
    workflow: str
    scheduled_for: datetime
    manual: bool
    status: str
    recovered: bool
    retry_budget: int
    attempts_count: int
    deadline_at: datetime
    error_category: str | None
    error: str | None
    failed_step: str | None
    requested_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    rows: int | None = None  # rows the verdict's attempt reported; None: no step reported a count
    cancelled_by: str | None = None


class StepOut(BaseModel):
    step: str
    position: int
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    log: str
    error: str | None


class AttemptOut(BaseModel):
    id: int
    number: int
    status: str
    worker_id: str | None
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    retryable: bool | None
    error_category: str | None
    error: str | None
    failed_step: str | None
    log_tail: str | None
    steps: list[StepOut]


class RunDetailOut(RunOut):
    attempts: list[AttemptOut]


class RunCredentialIn(Input):
    credential: Annotated[str, Field(min_length=1, max_length=4096,
                                     description="The TICKWARDEN_RUN_CREDENTIAL a step presented.")]


class RunCredentialOut(BaseModel):
    """Whether a run credential names an attempt of the caller's tenant that is running now.

    `reason` says why not when `valid` is false; the other fields are given only when valid.
    """

    valid: bool
    reason: str | None = None
    tenant: str | None = None
    workflow: str | None = None
    publisher: str | None = None
    scheduled_for: datetime | None = None
    attempt: int | None = None
    run_id: int | None = None


class AlertOut(BaseModel):
    id: int
    tenant: str
    workflow: str
    status: str
    first_severity: str
    severity: str
    owner: str
    failure_count: int
    cadence_seconds: int
    escalate_at: datetime
    shadow: bool
    first_failure_at: datetime
    last_failure_at: datetime
    last_run_id: int | None
    last_error_category: str | None
    last_error: str | None
    failed_step: str | None
    opened_at: datetime
    escalated_at: datetime | None
    resolved_at: datetime | None
    resolved_by_run_id: int | None
    downtime_seconds: int | None
    acknowledged_at: datetime | None = None
    acknowledged_by: str | None = None
    snoozed_until: datetime | None = None
    reason: str = "consecutive_failures"  # the rule that opened it: consecutive_failures | failure_rate


class AlertEventOut(BaseModel):
    id: int
    kind: str
    at: datetime
    severity: str
    owner: str
    actor: str
    note: str | None
    data: dict[str, Any]
    internal: bool = False


class FailingStepOut(BaseModel):
    run_id: int
    attempt: int
    step: str | None
    error_category: str | None
    error: str | None
    log: str


class AlertDetailOut(AlertOut):
    events: list[AlertEventOut]
    failing_step: FailingStepOut | None


class EnvironmentInstanceOut(BaseModel):
    id: int
    worker_id: str
    pid: int | None
    status: str
    started_at: datetime
    last_used_at: datetime
    stopped_at: datetime | None
    runs_served: int


class EnvironmentPodOut(BaseModel):
    """A `runtime: kubernetes` environment's pod: what it is given, and what tickwarden last asked of it."""

    image: str | None
    resources: dict[str, Any]
    volume: dict[str, Any] | None
    awake: bool = Field(description="Scaled to one replica (woken) rather than to zero (stopped when idle).")
    last_used_at: datetime | None
    woken_at: datetime | None
    stopped_at: datetime | None
    wakes: int


class EnvironmentOut(BaseModel):
    id: int
    tenant: str
    name: str
    python: str | None
    idle_timeout_seconds: int
    settings: dict[str, Any]
    runtime: str = Field(description="`process` (local to each worker) or `kubernetes` (one pod, shared).")
    pod: EnvironmentPodOut | None = Field(description="The pod of a `kubernetes` environment; null otherwise.")
    live_instances: int
    created_at: datetime
    updated_at: datetime


class EnvironmentDetailOut(EnvironmentOut):
    instances: list[EnvironmentInstanceOut]


class ChannelOut(BaseModel):
    id: int
    tenant: str | None
    name: str
    kind: str
    audience: str
    config: dict[str, Any]
    has_secret: bool
    enabled: bool
    disabled_reason: str | None
    created_at: datetime


class TestSendOut(BaseModel):
    channel_id: int
    delivered: bool
    detail: str


class MeOut(BaseModel):
    name: str
    role: str
    tenant: str | None


# -- requests -------------------------------------------------------------------


class WorkflowIn(WorkflowDefinition, Input):
    """A workflow and its schedule, created or replaced: the workflow file's own entry, one schema for both.

    The tenant and the name come from the path; given in the body as well, they must match it.
    """

    name: str | None = Field(default=None, pattern=OBJECT_NAME)  # type: ignore[assignment]


class ReassignIn(Input):
    owner: Literal["engineering", "customer"]
    note: Annotated[Text, Field(max_length=2000)] | None = None


class NoteIn(Input):
    note: Annotated[Text, Field(min_length=1, max_length=2000)]
    internal: bool = Field(False, description="For the platform team only (platform tokens): never sent to the tenant.")


class AcknowledgeIn(Input):
    note: Annotated[Text, Field(max_length=2000)] | None = None


class SnoozeIn(Input):
    seconds: Annotated[int, Field(ge=60, le=30 * 86400, description="How long to hold escalation.")]
    note: Annotated[Text, Field(max_length=2000)] | None = None


class ResolveIn(Input):
    note: Annotated[Text, Field(min_length=1, max_length=2000, description="Why it is resolved by hand.")]
