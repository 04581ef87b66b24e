"""Control-plane operations on the catalog, shared by the CLI and the API.

`apply_file` turns a validated workflow file into upserts, all in one transaction;
`pause`, `resume` and `run_now` act on one workflow named `TENANT/WORKFLOW`.
`publish` is the only code that writes a workflow and its schedule: `apply`, the
API's publish, pause, resume and profile changes all go through it.
A schedule's write sets its next fire time in the same statement (`store.apply_schedules`),
so the ticker fires it from its next pass; the wake-up sent with the commit only makes
that pass come sooner.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tickwarden import alerts, maintenance, profile, retention
from tickwarden.db import Database
from tickwarden.errors import Conflict, InvalidField, InvalidInput, NotFound
from tickwarden.models import Run, Schedule, Tenant, Workflow
from tickwarden.sanitize import clean_actor
from tickwarden.store import Store
from tickwarden.store.catalog import Applied, ScheduleContent, WorkflowContent, WorkflowSummary
from tickwarden.profile import PolicyOverrides
from tickwarden.models import WindowSpec

if TYPE_CHECKING:
    # The workflow-file layer (YAML, the channels' checks and the HTTP client they load) loads
    # with the two functions that read a definition: a command that records a tick or a
    # check-in, or lists the catalog, never pays for it.
    from tickwarden.workflow_file import PlannedWorkflow, WorkflowDefinition

KINDS = ("tenant", "user", "environment", "channel", "workflow", "schedule")


@dataclass
class ApplyReport:
    """What an apply did, per kind of object: created, updated and unchanged counts."""

    source: str
    counts: dict[str, dict[str, int]] = field(
        default_factory=lambda: {kind: {"created": 0, "updated": 0, "unchanged": 0} for kind in KINDS}
    )
    dry_run: bool = False
    changes: list[dict[str, str]] = field(default_factory=list)  # what was (or would be) created or updated
    warnings: list[str] = field(default_factory=list)

    def add(self, applied: Applied, label: str = "") -> None:
        self.counts[applied.kind][applied.change] += 1
        if applied.change != "unchanged":
            self.changes.append({"kind": applied.kind, "name": label, "change": applied.change})

    def total(self, change: str) -> int:
        return sum(c[change] for c in self.counts.values())

    @property
    def created(self) -> int:
        return self.total("created")

    @property
    def updated(self) -> int:
        return self.total("updated")

    @property
    def unchanged(self) -> int:
        return self.total("unchanged")

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "dry_run": self.dry_run, "created": self.created, "updated": self.updated,
                "unchanged": self.unchanged, "by_kind": self.counts, "changes": self.changes,
                "warnings": self.warnings}


class _DryRun(Exception):
    """Raised inside the apply transaction so that a dry run rolls everything back."""


@dataclass(frozen=True)
class Budget:
    """What a tick (or manual run) of a workflow gets: retries, their backoffs and the timeout its deadline assumes."""

    retries: int
    timeout_seconds: int
    interval_seconds: int
    backoffs: tuple[int, ...] = ()

    def deadline(self, scheduled_for: datetime) -> datetime:
        """`profile.run_deadline` of a tick under this budget: the tick plus the budget's span."""
        return scheduled_for + self.deadline_span

    @functools.cached_property
    def deadline_span(self) -> timedelta:
        """`profile.run_deadline_span` of this budget, computed once: a budget is shared by every tick of
        its workflows (`budget_for` remembers it), and the simulator asks for a deadline per attempt.
        """
        return profile.run_deadline_span(timeout_seconds=self.timeout_seconds, backoffs=self.backoffs,
                                         interval_seconds=self.interval_seconds)

    def external_deadline(self, scheduled_for: datetime, *, started: bool = False) -> datetime:
        """The deadline of an external workflow's tick: no retries count (`profile.external_run_deadline`)."""
        return profile.external_run_deadline(scheduled_for, timeout_seconds=self.timeout_seconds,
                                             interval_seconds=self.interval_seconds, started=started)


@functools.lru_cache(maxsize=4096)
def _budget(cadence_seconds: int, overrides_json: str, monitoring_enabled: bool, timeout_seconds: int | None) -> Budget:
    derived = profile.derive_profile(cadence_seconds, json.loads(overrides_json))
    backoffs = derived.backoffs() if monitoring_enabled else ()
    timeout = profile.timeout_for(timeout_seconds, cadence_seconds)
    return Budget(retries=len(backoffs), timeout_seconds=timeout, interval_seconds=cadence_seconds, backoffs=backoffs)


def budget_for(
    cadence_seconds: int, overrides: dict[str, Any] | str | None, monitoring_enabled: bool, timeout_seconds: int | None
) -> Budget:
    """Return the retry budget and timeout of a workflow; cached, since a fleet shares few profiles.

    Retries and their backoffs come from the profile when monitoring is on, else none; the timeout is
    the workflow's own or the profile's default for its cadence.
    """
    text = overrides if isinstance(overrides, str) else json.dumps(overrides or {}, sort_keys=True)
    return _budget(int(cadence_seconds), text, bool(monitoring_enabled), timeout_seconds)


def apply_file(db: Database, path: str | Path, now: datetime, *, dry_run: bool = False) -> ApplyReport:
    """Validate a workflow file, then upsert everything it declares in one transaction.

    A dry run takes the very same path and rolls the transaction back, so what it
    reports is exactly what an apply would change.
    """
    from tickwarden.workflow_file import load_file

    plan = load_file(path, now)
    report = ApplyReport(source=plan.source, dry_run=dry_run)
    try:
        _apply_plan(db, plan, now, report, dry_run)
    except _DryRun:
        pass
    return report


def _apply_plan(db: Database, plan: Any, now: datetime, report: ApplyReport, dry_run: bool) -> None:
    with db.transaction() as store:
        tenant_ids: dict[str, int] = {}
        for tenant in plan.tenants:
            applied = store.catalog.apply_tenant(tenant.name, tenant.display_name or tenant.name, tenant.shadow, now)
            tenant_ids[tenant.name] = applied.id
            report.add(applied, tenant.name)
            if tenant.retention is not None:
                retention.set_tenant_retention(store, applied.id, tenant.retention, now)
        user_ids: dict[tuple[str, str], int] = {}
        for tenant_name, user in plan.users:
            applied = store.catalog.apply_user(tenant_ids[tenant_name], user.email, user.name or user.email, user.active, now)
            user_ids[(tenant_name, user.email)] = applied.id
            report.add(applied, f"{tenant_name}/{user.email}")
        env_ids: dict[tuple[str, str], int] = {}
        for tenant_name, env in plan.environments:
            applied = store.catalog.apply_environment(tenant_ids[tenant_name], env.name, env.python, env.idle_timeout_seconds, now,
                                              env.runtime, env.pod())
            env_ids[(tenant_name, env.name)] = applied.id
            report.add(applied, f"{tenant_name}/{env.name}")
        for tenant_name, channel in plan.channels:
            report.add(store.catalog.apply_channel(
                tenant_ids[tenant_name], channel.name, kind=channel.kind, audience=channel.audience,
                config=channel.config, secret_ref=channel.secret_ref, now=now,
                severities=channel.routed_severities(), events=channel.routed_events(),
            ), f"{tenant_name}/{channel.name}")
        for channel in plan.platform_channels:
            report.add(store.catalog.apply_channel(
                None, channel.name, kind=channel.kind, audience=channel.audience,
                config=channel.config, secret_ref=channel.secret_ref, now=now,
                severities=channel.routed_severities(), events=channel.routed_events(),
            ), f"platform/{channel.name}")
        for planned in plan.workflows:
            label = f"{planned.tenant}/{planned.spec.name}"
            publication = Publication.planned(planned, tenant_ids[planned.tenant],
                                              env_ids[(planned.tenant, planned.spec.environment)],
                                              user_ids[(planned.tenant, planned.spec.publisher)])
            publish(store, publication, now, actor="apply", report=report, label=label)
        if dry_run:
            raise _DryRun
        if report.created or report.updated:
            _wake_trigger(store)  # sooner than its next pass; correct without it


def _wake_trigger(store: Store) -> None:
    """Wake whichever trigger runs: the built-in ticker, or the Kubernetes trigger's reconciler."""
    store.trigger.notify_wake("ticker")
    store.trigger.notify_wake("reconciler")


@dataclass(frozen=True)
class Publication:
    """Everything one publish writes: a workflow row and its schedule row, names resolved to ids.

    Built from a validated workflow entry (`planned`: a file's or an API body's) or from the
    stored rows (`stored`: pause, resume and profile changes edit one field of what is there).
    """

    tenant_id: int
    name: str
    description: str
    environment_id: int | None
    publisher_id: int | None
    recipe: dict[str, Any]
    timeout_seconds: int | None
    monitoring_enabled: bool
    policy_overrides: dict[str, Any]
    shadow: bool
    expect_rows: bool
    archived: bool
    cron: str
    timezone: str
    status: str
    cadence_seconds: int
    starting_deadline_seconds: int
    kind: str = "managed"
    keep_outputs: bool = False
    # The entry's own maintenance windows, replacing those it brought before (operators'
    # windows are kept); None leaves them alone (pause, resume and profile changes).
    maintenance: tuple[WindowSpec, ...] | None = None

    @classmethod
    def planned(cls, planned: PlannedWorkflow, tenant_id: int, environment_id: int, publisher_id: int) -> Publication:
        spec = planned.spec
        return cls(
            tenant_id=tenant_id, name=spec.name, description=spec.description, environment_id=environment_id,
            publisher_id=publisher_id, recipe=planned.recipe, timeout_seconds=spec.timeout_seconds,
            monitoring_enabled=spec.monitoring, policy_overrides=planned.policy, shadow=spec.shadow,
            expect_rows=spec.expect_rows, archived=spec.archived, cron=spec.schedule.cron,
            timezone=spec.schedule.timezone, status=spec.schedule.status, cadence_seconds=planned.cadence_seconds,
            starting_deadline_seconds=spec.schedule.starting_deadline_seconds, kind=spec.kind,
            keep_outputs=spec.keep_outputs, maintenance=planned.maintenance,
        )

    @classmethod
    def stored(cls, workflow: Workflow, schedule: Schedule) -> Publication:
        return cls(
            tenant_id=workflow.tenant_id, name=workflow.name, description=workflow.description,
            environment_id=workflow.environment_id, publisher_id=workflow.publisher_id, recipe=workflow.recipe,
            timeout_seconds=workflow.timeout_seconds, monitoring_enabled=workflow.monitoring_enabled,
            policy_overrides=workflow.policy_overrides, shadow=workflow.shadow, expect_rows=workflow.expect_rows,
            archived=workflow.archived_at is not None, cron=schedule.cron, timezone=schedule.timezone,
            status=schedule.status, cadence_seconds=schedule.cadence_seconds,
            starting_deadline_seconds=schedule.starting_deadline_seconds, kind=workflow.kind,
            keep_outputs=workflow.keep_outputs,
        )


@dataclass(frozen=True)
class Published:
    """What a publish did: the workflow's and the schedule's rows and whether each was created or changed."""

    workflow: Applied
    schedule: Applied

    @property
    def change(self) -> str:
        """created (the workflow is new), updated (anything changed) or unchanged."""
        if self.workflow.change == "created":
            return "created"
        return "updated" if "updated" in (self.workflow.change, self.schedule.change) else "unchanged"


def publish(store: Store, pub: Publication, now: datetime, *, actor: str, report: ApplyReport | None = None,
            label: str = "") -> Published:
    """The one write of a workflow and its schedule: apply, the API, pause, resume and profile changes.

    In the caller's transaction. Identical content writes nothing (`unchanged`); a new or
    re-activated schedule fires from its next tick after `now` (set in the same statement,
    so no loop has to prepare it); a schedule going from active to paused tells the open
    alert's thread; `archived` archives (a file re-applied to an archived workflow changes
    nothing; without `archived` it restores it). The trigger is woken at commit, which only
    makes its next pass come sooner.
    """
    return publish_all(store, [pub], now, actor=actor, report=report, labels=[label])[0]


def publish_all(store: Store, pubs: Sequence[Publication], now: datetime, *, actor: str,
                report: ApplyReport | None = None, labels: Sequence[str] | None = None) -> list[Published]:
    """Publish several workflows as `publish` does each, in one statement a stage.

    Each stage is one set-based statement for every publication (the locks, the stored
    schedules of those that exist, the workflows, the schedules: `publish` is its case of
    one), so a stage is one round trip, and the server plans and runs one statement where
    it ran one per workflow. The publications are distinct workflows (an upsert cannot
    change one row twice in a statement): a stage never depends on another publication's
    earlier stage, and the rows are written in the order given, as one `publish` after
    the other would write them. Maintenance windows and archiving, which only some
    publications bring, stay one statement each.
    """
    if not pubs:
        return []
    assert len({(pub.tenant_id, pub.name) for pub in pubs}) == len(pubs), "publish_all publishes distinct workflows"
    names = list(labels) if labels is not None else [""] * len(pubs)
    found = store.catalog.lock_workflows([(pub.tenant_id, pub.name) for pub in pubs])
    existing_ids = [existing.id for existing in found if existing is not None]
    stored = store.catalog.get_schedules_for_workflows(existing_ids) if existing_ids else {}
    currents = [stored.get(existing.id) if existing else None for existing in found]
    results: list[Published | None] = [None] * len(pubs)
    writing: list[int] = []  # the publications whose workflow is written, in the order given
    for i, (pub, existing, current) in enumerate(zip(pubs, found, currents, strict=True)):
        if pub.archived and existing is not None and existing.archived_at is not None:
            results[i] = Published(Applied("workflow", existing.id, "unchanged", existing),
                                   Applied("schedule", current.id if current else 0, "unchanged", current))
            continue
        if report is not None and current is not None and current.status == "paused" and pub.status == "active":
            # The content says active: publishing it resumes a schedule someone paused by hand.
            report.warnings.append(f"{names[i]} is paused; this file resumes it (set schedule.status: paused "
                                   "to keep it paused).")
        writing.append(i)
    written = store.catalog.apply_workflows(
        [_content(WorkflowContent, pubs[i]) for i in writing], now) if writing else []
    workflows = dict(zip(writing, written, strict=True))
    for i, workflow in workflows.items():
        pub = pubs[i]
        if pub.maintenance is not None and maintenance.replace_file_windows(store, pub.tenant_id, workflow.id,
                                                                           pub.maintenance, now):
            if report is not None:
                report.changes.append({"kind": "maintenance", "name": names[i], "change": "updated"})
        if pub.archived and _archive(store, workflow.id, actor, now) is not None:
            workflows[i] = workflow = Applied(
                workflow.kind, workflow.id, "created" if workflow.change == "created" else "updated", workflow.row)
    schedules = store.catalog.apply_schedules(
        [_content(ScheduleContent, pubs[i], workflow_id=workflows[i].id) for i in writing], now) if writing else []
    for i, schedule in zip(writing, schedules, strict=True):
        results[i] = Published(workflows[i], schedule)
    published_all = [published for published in results if published is not None]
    if any(published.change != "unchanged" for published in published_all):
        _wake_trigger(store)
    for i, published in enumerate(results):
        assert published is not None
        if i in workflows:
            current = currents[i]
            if current is not None and current.status == "active" and pubs[i].status == "paused" \
                    and not pubs[i].archived:
                alerts.note_paused(store, published.workflow.id, actor, now)
        _report(report, published, names[i], with_schedule=i in workflows or currents[i] is not None)
    return published_all


_Content = TypeVar("_Content", WorkflowContent, ScheduleContent)


def _content(cls: type[_Content], pub: Publication, **given: Any) -> _Content:
    """What `cls` writes, taken from the publication's fields of the same names (and `given`, which it lacks).

    By name, not field by field: a field added to both is carried without a third list of them.
    """
    return cls(**{f.name: getattr(pub, f.name) for f in fields(cls) if f.init and hasattr(pub, f.name)}, **given)


def _report(report: ApplyReport | None, published: Published, label: str, *, with_schedule: bool) -> None:
    if report is None:
        return
    report.add(published.workflow, label)
    if with_schedule:
        report.add(published.schedule, label)


def publish_workflow(db: Database, tenant: str, spec: WorkflowDefinition, now: datetime, *, actor: str) -> Published:
    """Publish one workflow entry (the API's body) whose environment and publisher already exist.

    The entry is checked exactly as a file's (`workflow_file.plan_workflow`); the names
    it refers to must be the tenant's: an environment, and an active user to publish as.
    """
    from tickwarden.workflow_file import plan_workflow

    with db.transaction() as store:
        found = find_tenant(store, tenant)
        planned = plan_workflow(spec, tenant, now)
        environment = store.api.get_environment_by_name(tenant, spec.environment)
        if environment is None:
            raise InvalidField("environment", f"tenant {tenant!r} has no environment named {spec.environment!r}")
        publisher = store.api.get_user_by_email(tenant, spec.publisher)
        if publisher is None or not publisher.active:
            raise InvalidField("publisher", f"tenant {tenant!r} has no active user {spec.publisher!r} to publish as")
        return publish(store, Publication.planned(planned, found.id, environment.id, publisher.id), now, actor=actor)


def set_policy(db: Database, tenant: str, workflow: str, overrides: PolicyOverrides, now: datetime,
               actor: str = "tickwarden") -> profile.Profile:
    """Replace a workflow's profile overrides (omitted fields return to the cadence's default); the new profile.

    A workflow without a schedule has no cadence, so no profile; an archived one is
    restored only by publishing it again.
    """
    with db.transaction() as store:
        found = find_workflow(store, tenant, workflow)
        schedule = store.catalog.get_schedule_for_workflow(found.id)
        if schedule is None:
            raise Conflict(f"Workflow {tenant}/{workflow} has no schedule, so it has no cadence profile.")
        if found.archived_at is not None:
            raise Conflict(f"Workflow {tenant}/{workflow} is archived; apply its file again to restore it.")
        derived = profile.derive_profile(schedule.cadence_seconds, overrides)
        changed = replace(Publication.stored(found, schedule), policy_overrides=overrides.model_dump(exclude_none=True))
        publish(store, changed, now, actor=actor)
        return derived


def parse_ref(ref: str) -> tuple[str, str]:
    """Split `TENANT/WORKFLOW`; raise InvalidInput with one sentence otherwise."""
    tenant, sep, workflow = ref.strip().partition("/")
    if not sep or not tenant or not workflow or "/" in workflow:
        raise InvalidInput(f"Expected TENANT/WORKFLOW (for example acme/nightly), got {ref!r}.")
    return tenant, workflow


def find_tenant(store: Store, tenant: str) -> Tenant:
    found = store.catalog.get_tenant_by_name(tenant)
    if found is None:
        raise NotFound(f"No tenant named {tenant!r}.")
    return found


def find_workflow(store: Store, tenant: str, workflow: str) -> Workflow:
    """Return the workflow `tenant/workflow`; raise NotFound naming what is missing."""
    found = store.catalog.get_workflow_by_name(tenant, workflow)
    if found is None:
        find_tenant(store, tenant)
        raise NotFound(f"Tenant {tenant!r} has no workflow named {workflow!r}.")
    return found


def find_schedule(store: Store, tenant: str, workflow: str) -> tuple[Workflow, Schedule]:
    found = find_workflow(store, tenant, workflow)
    schedule = store.catalog.get_schedule_for_workflow(found.id)
    if schedule is None:
        raise NotFound(f"Workflow {tenant}/{workflow} has no schedule.")
    return found, schedule


def pause(db: Database, tenant: str, workflow: str, now: datetime, actor: str = "tickwarden") -> Schedule:
    """Pause a workflow's schedule: no new ticks from now on; already paused is fine.

    An open alert stays open (pausing fixes nothing), and its thread is told.
    """
    return _set_status(db, tenant, workflow, "paused", now, actor)


def archive(db: Database, tenant: str, workflow: str, now: datetime, actor: str = "tickwarden") -> Workflow:
    """Archive a workflow: it stops ticking and leaves the lists; applying its file again restores it.

    An open alert stays open and its thread is told, as for a pause.
    """
    with db.transaction() as store:
        found = find_workflow(store, tenant, workflow)
        archived = _archive(store, found.id, actor, now)
        return archived or found


def _archive(store: Store, workflow_id: int, actor: str, now: datetime) -> Workflow | None:
    """The one write that archives a workflow; None when it already was archived."""
    archived = store.catalog.archive_workflow(workflow_id, now)
    if archived is not None:
        _wake_trigger(store)  # the reconciler deletes its CronJob; the ticker simply stops seeing it
        alerts.note_paused(store, workflow_id, actor, now, alerts.ARCHIVED_NOTE)
    return archived


def resume(db: Database, tenant: str, workflow: str, now: datetime) -> Schedule:
    """Resume a paused schedule: ticks again from the next fire time after `now`, never a burst."""
    return _set_status(db, tenant, workflow, "active", now)


def _set_status(db: Database, tenant: str, workflow: str, status: str, now: datetime,
                actor: str = "tickwarden") -> Schedule:
    with db.transaction() as store:
        found, schedule = find_schedule(store, tenant, workflow)
        if found.archived_at is not None:
            raise Conflict(f"Workflow {tenant}/{workflow} is archived; apply its file again to restore it.")
        published = publish(store, replace(Publication.stored(found, schedule), status=status), now, actor=actor)
        row = published.schedule.row
        assert isinstance(row, Schedule)
        return row


def run_now(db: Database, tenant: str, workflow: str, now: datetime, requested_by: str | None = None) -> Run:
    """Queue a manual run of a workflow through the same ledger and worker path as a tick.

    Who asked is stored as a canceller is (`clean_actor`: redacted, one short line).
    """
    with db.transaction() as store:
        found = find_workflow(store, tenant, workflow)
        if found.archived_at is not None:
            raise Conflict(f"Workflow {tenant}/{workflow} is archived; apply its file again to restore it.")
        if found.kind == "external":
            raise Conflict(f"Workflow {tenant}/{workflow} is external: its own scheduler runs it and reports "
                           "with `tickwarden checkin`.")
        schedule = store.catalog.get_schedule_for_workflow(found.id)
        cadence_seconds = schedule.cadence_seconds if schedule else profile.UNSCHEDULED_CADENCE_SECONDS
        budget = budget_for(cadence_seconds, found.policy_overrides, found.monitoring_enabled, found.timeout_seconds)
        return store.ledger.create_manual_run(
            tenant_id=found.tenant_id,
            workflow_id=found.id,
            retry_budget=budget.retries,
            retry_backoff_seconds=list(budget.backoffs),
            deadline_at=budget.deadline(now),
            now=now,
            requested_by=clean_actor(requested_by) if requested_by is not None else None,
        )


def cancel(db: Database, run_id: int, now: datetime, actor: str) -> Run:
    """Cancel a run in progress: the one path of the CLI, the API, the dashboard and scenarios.

    The run becomes `cancelled` with its actor and is never retried; its running
    attempt is stopped through the worker's abort path (the next lease renewal is
    refused). A run that already has a verdict is refused, so a cancel never rewrites
    history. The actor is stored as an alert's is (`clean_actor`: redacted, one line).
    """
    with db.transaction() as store:
        cancelled = store.ledger.cancel_run(run_id, clean_actor(actor), now)
        if cancelled is not None:
            return cancelled
        run = store.ledger.get_run(run_id)
        if run is None:
            raise NotFound(f"There is no run {run_id}.")
        raise Conflict(f"Run {run_id} is already {run.status}; only a run in progress can be cancelled.")


def list_runs(db: Database, tenant: str, workflow: str, limit: int = 50) -> list[Run]:
    """Return a workflow's runs, newest first."""
    if limit < 1:
        raise InvalidInput("The limit must be at least 1.")
    with db.transaction() as store:
        found = find_workflow(store, tenant, workflow)
        return store.ledger.list_runs(found.id, limit=limit)


def list_workflows(db: Database, tenant: str | None = None) -> list[WorkflowSummary]:
    """Return every workflow (of one tenant, when given) with its schedule and newest run."""
    with db.transaction() as store:
        if tenant is not None:
            find_tenant(store, tenant)
        return store.catalog.workflow_summaries(tenant)
