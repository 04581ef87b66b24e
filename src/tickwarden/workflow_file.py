"""Workflow files: the YAML a user applies, parsed and validated before anything is written.

A file declares tenants, their users (publishers), environments, notification
channels and workflows; `catalog.apply_file` upserts what it declares. Every
reference (a workflow's tenant, environment and publisher) must be declared in the
same file, so a file is a self-contained unit that can be applied anywhere.

Validation happens in layers and stops at the first problem, reported as one
sentence naming the file and the offending key path:

0. Bounds: the file's size, the depth of its nesting, and no text that PostgreSQL
   cannot store (NUL) or UTF-8 cannot encode (a lone surrogate), anywhere.
1. Shape (pydantic): unknown keys, missing keys, wrong types (an integer is never a
   boolean), bad names, every text field bounded in length.
2. Meaning: duplicates, unknown references, the recipe graph (unknown steps in
   `depends_on`, cycles, kind-specific fields), cron and zone, policy overrides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from tickwarden import cadence, profile, secrets
from tickwarden.environments import podspec
from tickwarden.errors import InvalidField, InvalidInput, TickwardenError
from tickwarden.reserved import SELFTEST_TENANT_PREFIX, is_selftest_tenant
from tickwarden.maintenance import MAX_WINDOWS_PER_WORKFLOW, window_spec
from tickwarden.models import WindowSpec
from tickwarden.retention import RetentionSpec
from tickwarden.transports.email import login_problem

TENANT_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}$"
OBJECT_NAME = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
STEP_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
CALL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
SECRET_REF = re.compile(r"^[a-z][a-z0-9_]*:[A-Za-z0-9_./-]+$")
# Bounds on what a file may hold: what one apply writes, and what a listing returns, stays small.
MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_TEXT = 2000  # descriptions, display names and other free text
MAX_QUERY = 100_000
SURROGATE = re.compile("[\ud800-\udfff]")

ShortText = Annotated[str, Field(max_length=200)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TenantSpec(_Model):
    name: str = Field(pattern=TENANT_NAME)
    display_name: ShortText | None = None
    shadow: bool = False
    retention: RetentionSpec | None = None  # omitted: the tenant's overrides stay as they are

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        # The self-test's synthetic tenants are found and removed by this prefix.
        if is_selftest_tenant(name):
            raise ValueError(f"tenant names starting with {SELFTEST_TENANT_PREFIX!r} are reserved for tickwarden selftest")
        return name


class UserSpec(_Model):
    tenant: str | None = None
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)
    name: ShortText | None = None
    active: bool = True


class EnvironmentSpec(_Model):
    tenant: str | None = None
    name: str = Field(pattern=OBJECT_NAME)
    python: str | None = Field(default=None, max_length=1000)
    idle_timeout_seconds: StrictInt = Field(default=600, ge=1, le=86400)
    # runtime kubernetes: one StatefulSet per environment (environments/podspec.py checks the rest)
    runtime: Literal["process", "kubernetes"] = "process"
    image: str | None = Field(default=None, max_length=300)
    resources: dict[str, Any] | None = None
    volume: dict[str, Any] | None = None

    def pod(self) -> dict[str, Any] | None:
        """The pod this environment runs as (None for runtime process); PodSpecError when it is not acceptable."""
        return podspec.pod_settings(self.runtime, self.image, self.python if self.runtime == "kubernetes" else None,
                                    self.resources, self.volume)


Severity = Literal["warning", "critical"]
EventKind = Literal["opened", "escalated", "reassigned", "acknowledged", "snoozed", "paused", "noted", "resolved"]
ROUTABLE_SEVERITIES: tuple[str, ...] = get_args(Severity)
ROUTABLE_EVENTS: tuple[str, ...] = get_args(EventKind)


class _Routed(_Model):
    """Routing: the severities and event kinds a channel takes; left out, every one (the default)."""

    severities: list[Severity] | None = Field(default=None, min_length=1, max_length=2)
    events: list[EventKind] | None = Field(default=None, min_length=1, max_length=8)

    def routed_severities(self) -> list[str] | None:
        return sorted(set(self.severities)) if self.severities else None

    def routed_events(self) -> list[str] | None:
        return sorted(set(self.events)) if self.events else None


class ChannelSpec(_Routed):
    tenant: str | None = None
    name: str = Field(min_length=1, max_length=100)
    kind: Literal["slack", "email", "webhook", "pagerduty", "teams"]
    audience: Literal["customer", "engineering", "shadow"] = "customer"
    config: dict[str, Any] = Field(default_factory=dict)
    secret_ref: str | None = Field(default=None, max_length=200)


class PlatformChannelSpec(_Routed):
    name: str = Field(min_length=1, max_length=100)
    kind: Literal["slack", "email", "webhook", "pagerduty", "teams"]
    audience: Literal["engineering", "shadow"] = "engineering"
    config: dict[str, Any] = Field(default_factory=dict)
    secret_ref: str | None = Field(default=None, max_length=200)


class ScheduleSpec(_Model):
    cron: str = Field(max_length=200)
    timezone: str = Field(default="UTC", max_length=64)
    status: Literal["active", "paused"] = "active"
    starting_deadline_seconds: StrictInt = Field(default=300, ge=1, le=86400)


class StepSpec(_Model):
    name: str = Field(pattern=STEP_NAME)
    kind: Literal["python", "sql"]
    depends_on: list[str] = Field(default_factory=list, max_length=100)
    call: str | None = Field(default=None, max_length=200)
    params: dict[str, Any] | None = None
    query: str | None = Field(default=None, max_length=MAX_QUERY)
    database: str | None = Field(default=None, max_length=200)
    secrets: list[str] | None = Field(default=None, max_length=50)
    timeout_seconds: StrictInt | None = Field(default=None, ge=1, le=604800)


class MaintenanceWindowSpec(_Model):
    """A window in which nothing is delivered for the workflow: start/end, or cron + duration (+ timezone)."""

    start: datetime | str | None = None
    end: datetime | str | None = None
    cron: str | None = Field(default=None, max_length=200)
    duration: StrictInt | str | None = None
    timezone: str | None = Field(default=None, max_length=64)
    note: str | None = Field(default=None, max_length=500)


class WorkflowDefinition(_Model):
    tenant: str | None = None
    name: str = Field(pattern=OBJECT_NAME)
    description: str = Field(default="", max_length=MAX_TEXT)
    environment: str = Field(max_length=200)
    publisher: str = Field(max_length=254)
    schedule: ScheduleSpec
    timeout_seconds: StrictInt | None = Field(default=None, ge=1, le=604800)
    monitoring: bool = True
    policy: profile.PolicyOverrides = Field(default_factory=profile.PolicyOverrides)  # the one overrides schema
    shadow: bool = False
    archived: bool = False  # no more ticks; runs and alerts stay readable; false (or absent) restores it
    expect_rows: bool = False
    # step outputs (customer data) are stored only when asked; otherwise only statuses and logs
    keep_outputs: bool = False
    # managed: tickwarden runs the steps; external: another scheduler runs the job and reports check-ins
    kind: Literal["managed", "external"] = "managed"
    steps: list[StepSpec] | None = Field(default=None, max_length=100)
    maintenance: list[MaintenanceWindowSpec] = Field(default_factory=list, max_length=MAX_WINDOWS_PER_WORKFLOW)


class WorkflowFile(_Model):
    tenants: list[TenantSpec] = Field(default_factory=list)
    users: list[UserSpec] = Field(default_factory=list)
    environments: list[EnvironmentSpec] = Field(default_factory=list)
    channels: list[ChannelSpec] = Field(default_factory=list)
    platform_channels: list[PlatformChannelSpec] = Field(default_factory=list)
    workflows: list[WorkflowDefinition] = Field(default_factory=list)


@dataclass(frozen=True)
class PlannedWorkflow:
    """A validated workflow with everything `apply` writes, derived once."""

    tenant: str
    spec: WorkflowDefinition
    recipe: dict[str, Any]
    cadence_seconds: int
    policy: dict[str, Any]
    maintenance: tuple[WindowSpec, ...] = ()


@dataclass(frozen=True)
class FilePlan:
    """A validated file: what to upsert, with every tenant reference resolved."""

    source: str
    tenants: list[TenantSpec]
    users: list[tuple[str, UserSpec]]
    environments: list[tuple[str, EnvironmentSpec]]
    channels: list[tuple[str, ChannelSpec]]
    platform_channels: list[PlatformChannelSpec]
    workflows: list[PlannedWorkflow]


class _Invalid(Exception):
    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


def load_file(path: str | Path, now: datetime) -> FilePlan:
    """Read, parse and validate a workflow file; raise InvalidInput with one sentence."""
    source = Path(path)
    try:
        if source.is_file() and source.stat().st_size > MAX_FILE_BYTES:
            raise InvalidInput(f"{source.name}: the file is larger than {MAX_FILE_BYTES // 1024} KiB.")
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"{source}: no such file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{source}: cannot be read ({type(exc).__name__}).") from None
    return parse_text(text, source.name, now)


def parse_text(text: str, source: str, now: datetime) -> FilePlan:
    """Parse and validate the text of a workflow file named `source`."""
    if len(text) > MAX_FILE_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise InvalidInput(f"{source}: the file is larger than {MAX_FILE_BYTES // 1024} KiB.")
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise InvalidInput(f"{source}: the file nests deeper than {MAX_DEPTH} levels.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "malformed YAML"
        raise InvalidInput(f"{source}: YAML syntax error{where}: {problem}.") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidInput(f"{source}: the file must be a mapping with keys such as tenants and workflows.")
    problem = plain_data_problem(data)
    if problem is not None:
        raise InvalidInput(f"{source}: {problem}")
    try:
        document = WorkflowFile.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"{source}: {_describe_validation(exc)}") from None
    try:
        return _plan(document, source, now)
    except _Invalid as exc:
        raise InvalidInput(f"{source}: {exc.path}: {exc.message}.") from None


def plain_data_problem(data: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """Return one sentence on why parsed data cannot be stored, or None when it can.

    Walks without recursion, so hostile nesting costs a bounded loop, not the stack:
    deeper than `max_depth`, a NUL (PostgreSQL text cannot hold it) or a lone
    surrogate (not encodable as UTF-8) anywhere, in a key or a value.
    """
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > max_depth:
            where = path if len(path) <= 60 else path[:60] + "…"
            return f"{where}: nested deeper than {max_depth} levels."
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and (problem := _text_problem(key)):
                    return f"{path or '(top level)'}: a key {problem}."
                stack.append((item, where, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str) and (problem := _text_problem(value)):
            return f"{path or '(top level)'}: the text {problem}."
    return None


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    if SURROGATE.search(text):
        return "contains a lone surrogate, which is not valid Unicode"
    return None


def _describe_validation(exc: ValidationError) -> str:
    error = exc.errors()[0]
    path = _path(error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{path}: unknown key."
    if kind == "missing":
        return f"{path}: required key is missing."
    if kind == "string_pattern_mismatch":
        value = error.get("input")
        return f"{path}: {value!r} is not a valid name or address."
    message = error["msg"].rstrip(".")
    return f"{path}: {message[0].lower() + message[1:]}."


def _path(loc: Iterable[Any]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def _plan(document: WorkflowFile, source: str, now: datetime) -> FilePlan:
    tenants = {t.name: t for t in document.tenants}
    _no_duplicates("tenants", [t.name for t in document.tenants])

    def tenant_of(kind: str, index: int, declared: str | None) -> str:
        if declared is None:
            if len(tenants) == 1:
                return next(iter(tenants))
            raise _Invalid(f"{kind}[{index}].tenant", "required when the file does not declare exactly one tenant")
        if declared not in tenants:
            raise _Invalid(f"{kind}[{index}].tenant", f"unknown tenant {declared!r}")
        return declared

    users = [(tenant_of("users", i, u.tenant), u) for i, u in enumerate(document.users)]
    _no_duplicates("users", [f"{t}/{u.email}" for t, u in users], label="user")
    environments = [(tenant_of("environments", i, e.tenant), e) for i, e in enumerate(document.environments)]
    _no_duplicates("environments", [f"{t}/{e.name}" for t, e in environments], label="environment")
    for i, (_, env) in enumerate(environments):
        try:
            env.pod()
        except podspec.PodSpecError as exc:
            raise _Invalid(f"environments[{i}].{exc.field}", exc.message) from None

    channels = [(tenant_of("channels", i, c.tenant), c) for i, c in enumerate(document.channels)]
    _no_duplicates("channels", [f"{t}/{c.name}" for t, c in channels], label="channel")
    for i, (tenant, channel) in enumerate(channels):
        if channel.audience == "engineering":
            raise _Invalid(f"channels[{i}].audience", "engineering channels belong to the platform: declare them under platform_channels")
        _check_tenant_ref(f"channels[{i}].secret_ref", channel.secret_ref, tenant)
        _check_channel_config(f"channels[{i}]", channel.kind, channel.config, channel.secret_ref)
    _no_duplicates("platform_channels", [c.name for c in document.platform_channels], label="channel")
    for i, channel in enumerate(document.platform_channels):
        _check_secret_ref(f"platform_channels[{i}].secret_ref", channel.secret_ref)
        _check_channel_config(f"platform_channels[{i}]", channel.kind, channel.config, channel.secret_ref)

    env_names = {(t, e.name) for t, e in environments}
    emails = {(t, u.email) for t, u in users}
    planned: list[PlannedWorkflow] = []
    seen: dict[tuple[str, str], int] = {}
    for i, spec in enumerate(document.workflows):
        where = f"workflows[{i}]"
        tenant = tenant_of("workflows", i, spec.tenant)
        if (tenant, spec.name) in seen:
            raise _Invalid(f"{where}.name", f"duplicate workflow {spec.name!r} (also workflows[{seen[(tenant, spec.name)]}])")
        seen[(tenant, spec.name)] = i
        if (tenant, spec.environment) not in env_names:
            raise _Invalid(f"{where}.environment", f"unknown environment {spec.environment!r} of tenant {tenant!r}")
        if (tenant, spec.publisher) not in emails:
            raise _Invalid(f"{where}.publisher", f"unknown user {spec.publisher!r} of tenant {tenant!r}")
        cadence_seconds = _check_schedule(f"{where}.schedule", spec.schedule, now)
        policy = _check_policy(f"{where}.policy", spec.policy, cadence_seconds)
        recipe = check_kind_and_steps(where, spec.kind, spec.steps, spec.expect_rows, tenant=tenant)
        windows = _check_maintenance(f"{where}.maintenance", spec.maintenance)
        planned.append(PlannedWorkflow(tenant, spec, recipe, cadence_seconds, policy, windows))
    return FilePlan(
        source=source,
        tenants=list(document.tenants),
        users=users,
        environments=environments,
        channels=channels,
        platform_channels=list(document.platform_channels),
        workflows=planned,
    )


def _check_maintenance(where: str, windows: list[MaintenanceWindowSpec]) -> tuple[WindowSpec, ...]:
    checked = []
    for i, w in enumerate(windows):
        try:
            checked.append(window_spec(start=w.start, end=w.end, cron=w.cron, duration=w.duration,
                                       timezone=w.timezone, note=w.note))
        except InvalidInput as exc:
            raise _Invalid(f"{where}[{i}]", _sentence_body(exc.message.replace("The maintenance window", "the window"))
                           ) from None
    return tuple(checked)
def plan_workflow(spec: WorkflowDefinition, tenant: str, now: datetime) -> PlannedWorkflow:
    """Check one workflow entry's meaning (schedule, policy, steps) as `apply` does for a file's.

    The API publishes through this, so a workflow means the same wherever it comes from;
    a problem raises InvalidField naming the key path within the entry (`schedule.cron`).
    """
    try:
        return _plan_workflow("", spec, tenant, now)
    except _Invalid as exc:
        raise InvalidField(exc.path, exc.message) from None


def _plan_workflow(where: str, spec: WorkflowDefinition, tenant: str, now: datetime) -> PlannedWorkflow:
    cadence_seconds = _check_schedule(f"{where}schedule", spec.schedule, now)
    policy = _check_policy(f"{where}policy", spec.policy, cadence_seconds)
    recipe = check_kind_and_steps(where.rstrip("."), spec.kind, spec.steps, spec.expect_rows, tenant=tenant)
    windows = _check_maintenance(f"{where}maintenance", spec.maintenance)
    return PlannedWorkflow(tenant, spec, recipe, cadence_seconds, policy, windows)


def _no_duplicates(kind: str, keys: list[str], label: str = "tenant") -> None:
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key in first:
            name = key.split("/", 1)[-1]
            raise _Invalid(f"{kind}[{i}]", f"duplicate {label} {name!r} (also {kind}[{first[key]}])")
        first[key] = i


def _check_secret_ref(where: str, ref: str | None) -> None:
    if ref is not None and not SECRET_REF.match(ref):
        # The value is not repeated: what was pasted here instead of a reference may be the secret itself.
        raise _Invalid(where, "not a secret reference such as 'env:NAME' (the value is not shown)")


def _check_tenant_ref(where: str, ref: str | None, tenant: str) -> None:
    """Refuse what a tenant may not refer to: anything but its own `secret:NAME` (or a mapped `env:`)."""
    if ref is None:
        return
    try:
        secrets.check_tenant_reference(ref, tenant)
    except secrets.SecretError as exc:
        raise _Invalid(where, exc.message) from None


# The secret each kind of channel cannot deliver without: what its transport reads from `secret_ref`.
_CHANNEL_SECRETS = {"slack": "its Slack token", "pagerduty": "its PagerDuty routing key",
                    "teams": "its Teams webhook URL"}


def channel_config_problem(kind: str, config: dict[str, Any], secret_ref: str | None = None
                           ) -> tuple[str, str] | None:
    """The first setting of a channel that cannot work, and why: (key, sentence body).

    The key is `secret_ref` or a key of the config. Each kind is held to what its
    transport reads when it delivers, so a channel that could never deliver is refused
    when it is declared, not found out by the first alert that needs it: an email channel
    needs `host`, `from` and `to` (and TLS when it logs in, or its password would cross
    the network in the clear), Slack a `channel`, a webhook an http(s) URL with a host;
    Slack, PagerDuty and Teams take their token, key or URL from `secret_ref`. A value is
    never repeated: a webhook's address may carry a token. The workflow file and
    `tickwarden channels add` both judge a channel by this.
    """
    if kind in _CHANNEL_SECRETS and not secret_ref:
        return "secret_ref", f"a {kind} channel needs 'secret_ref' for {_CHANNEL_SECRETS[kind]}"
    if kind == "email":
        return _email_config_problem(config)
    if kind == "slack" and not _text(config.get("channel")):
        return "channel", "a slack channel needs 'channel', the conversation to post in (an ID such as C0123 or #name)"
    if kind != "webhook":
        return None
    url = config.get("url")
    if not isinstance(url, str) or not url.strip():
        return "url", "a webhook channel needs 'url', an http or https address"
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "url", "not an http or https address with a host (the value is not shown)"
    return None


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _email_config_problem(config: dict[str, Any]) -> tuple[str, str] | None:
    if not _text(config.get("host")):
        return "host", "an email channel needs 'host', the SMTP server to send through"
    port = config.get("port")
    if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535):
        return "port", "an SMTP port is a whole number from 1 to 65535"
    sender = config.get("from")
    if not isinstance(sender, str) or "@" not in sender.strip(" @"):
        return "from", "an email channel needs 'from', the address it sends as (name@domain)"
    to = config.get("to")
    recipients = [to] if isinstance(to, str) else to
    if (not isinstance(recipients, list) or not recipients
            or not all(isinstance(r, str) and "@" in r.strip(" @") for r in recipients)):
        return "to", "an email channel needs 'to', an address or a list of addresses (name@domain)"
    problem = login_problem(config)
    return None if problem is None else ("username", problem)


def _check_channel_config(where: str, kind: str, config: dict[str, Any], secret_ref: str | None) -> None:
    """Refuse a channel that could not deliver; `where` names the channel (channels[0])."""
    problem = channel_config_problem(kind, config, secret_ref)
    if problem is not None:
        key = problem[0] if problem[0] == "secret_ref" else f"config.{problem[0]}"
        raise _Invalid(f"{where}.{key}", problem[1])


def _check_schedule(where: str, schedule: ScheduleSpec, now: datetime) -> int:
    try:
        parsed = cadence.parse_schedule(schedule.cron, schedule.timezone)
        return cadence.cadence_of(parsed, now).interval_seconds
    except TickwardenError as exc:
        key = "timezone" if "timezone" in exc.message.lower() else "cron"
        raise _Invalid(f"{where}.{key}", _sentence_body(exc.message)) from None


def _check_policy(where: str, policy: profile.PolicyOverrides, cadence_seconds: int) -> dict[str, Any]:
    """The overrides' shape is checked by the model; here, that they fit together on this cadence."""
    try:
        profile.derive_profile(cadence_seconds, policy)
    except TickwardenError as exc:
        raise _Invalid(where, _sentence_body(exc.message)) from None
    return policy.model_dump(exclude_none=True)


def check_kind_and_steps(where: str, kind: str, steps: list[StepSpec] | None, expect_rows: bool, *,
                         tenant: str) -> dict[str, Any]:
    """Return the stored recipe: none for an external workflow, the checked steps otherwise.

    An external workflow runs elsewhere, so steps would never run: refusing them keeps a
    file from promising work nobody does. `expect_rows` judges rows that steps report,
    so it means nothing without them.
    """
    prefix = f"{where}." if where else ""
    if kind == "external":
        if steps:
            raise _Invalid(f"{prefix}steps", "an external workflow has no steps: its own scheduler runs the job "
                                             "and reports check-ins")
        if expect_rows:
            raise _Invalid(f"{prefix}expect_rows", "an external workflow reports no rows, so it cannot expect them")
        return {"steps": []}
    if not steps:
        raise _Invalid(f"{prefix}steps", "a workflow needs at least one step (or kind: external)")
    return _check_steps(f"{prefix}steps", steps, tenant=tenant)


def _check_steps(where: str, steps: list[StepSpec], *, tenant: str) -> dict[str, Any]:
    """Check the recipe graph and return it in the stored recipe format.

    1. Names are unique; kind-specific keys are present and only those.
    2. Every `depends_on` names a step of the same workflow, not itself.
    3. The graph has no cycle (depth-first search with colours).
    """
    index: dict[str, int] = {}
    for i, step in enumerate(steps):
        if step.name in index:
            raise _Invalid(f"{where}[{i}].name", f"duplicate step {step.name!r} (also {where}[{index[step.name]}])")
        index[step.name] = i
    stored = []
    for i, step in enumerate(steps):
        at = f"{where}[{i}]"
        if step.kind == "python":
            if step.call is None:
                raise _Invalid(f"{at}.call", "a python step needs 'call' as 'package.module:function'")
            if not CALL.match(step.call):
                raise _Invalid(f"{at}.call", f"{step.call!r} is not of the form 'package.module:function'")
            for key in ("query", "database"):
                if getattr(step, key) is not None:
                    raise _Invalid(f"{at}.{key}", "only sql steps take this key")
            for j, ref in enumerate(step.secrets or []):
                _check_tenant_ref(f"{at}.secrets[{j}]", ref, tenant)
            entry: dict[str, Any] = {"name": step.name, "kind": "python", "depends_on": list(step.depends_on),
                                     "call": step.call, "params": dict(step.params or {})}
            if step.secrets:
                entry["secrets"] = list(dict.fromkeys(step.secrets))
        else:
            if not step.query or not step.query.strip():
                raise _Invalid(f"{at}.query", "a sql step needs a non-empty 'query'")
            if step.database is None:
                raise _Invalid(f"{at}.database", "a sql step needs 'database' as a secret reference such as 'secret:NAME'")
            _check_tenant_ref(f"{at}.database", step.database, tenant)
            for key in ("call", "params", "secrets"):
                if getattr(step, key) is not None:
                    raise _Invalid(f"{at}.{key}", "only python steps take this key")
            entry = {"name": step.name, "kind": "sql", "depends_on": list(step.depends_on),
                     "query": step.query, "database": step.database}
        entry["timeout_seconds"] = step.timeout_seconds
        for j, dependency in enumerate(step.depends_on):
            if dependency == step.name:
                raise _Invalid(f"{at}.depends_on[{j}]", f"step {step.name!r} depends on itself")
            if dependency not in index:
                raise _Invalid(f"{at}.depends_on", f"unknown step {dependency!r}")
        if len(set(step.depends_on)) != len(step.depends_on):
            raise _Invalid(f"{at}.depends_on", "a step is listed twice")
        stored.append(entry)
    cycle = _find_cycle(steps)
    if cycle:
        first = index[cycle[0]]
        raise _Invalid(f"{where}[{first}].depends_on", "the steps form a cycle: " + " -> ".join(cycle))
    return {"steps": stored}


def _find_cycle(steps: list[StepSpec]) -> list[str] | None:
    edges = {step.name: list(step.depends_on) for step in steps}
    colour: dict[str, int] = dict.fromkeys(edges, 0)  # 0 new, 1 on the stack, 2 done
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        colour[name] = 1
        stack.append(name)
        for dependency in edges[name]:
            if colour[dependency] == 1:
                return stack[stack.index(dependency):] + [dependency]
            if colour[dependency] == 0:
                found = visit(dependency)
                if found:
                    return found
        stack.pop()
        colour[name] = 2
        return None

    for step in steps:
        if colour[step.name] == 0:
            found = visit(step.name)
            if found:
                return found
    return None


def _sentence_body(message: str) -> str:
    text = message.strip().rstrip(".")
    return text[0].lower() + text[1:] if text else "not valid"
