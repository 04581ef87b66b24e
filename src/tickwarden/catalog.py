"""Control-plane operations on the catalog, shared by the CLI and the API.

`apply_file` turns a validated workflow file into upserts, all in one transaction;
`pause`, `resume` and `run_now` act on one workflow named `TENANT/WORKFLOW`.
A schedule's write sets its next fire time in the same statement (`store.apply_schedule`,
`store.set_schedule_status`), so the ticker fires it from its next pass; the wake-up
sent with the commit only makes that pass come sooner.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tickwarden import alerts, maintenance, profile, retention
from tickwarden.db import Database
from tickwarden.errors import Conflict, InvalidInput, NotFound
from tickwarden.models import Run, Schedule, Tenant, Workflow
from tickwarden.store import Store
from tickwarden.store.catalog import Applied, WorkflowSummary
from tickwarden.workflow_file import load_file

# The cadence assumed for a workflow that has no schedule (manual runs only).
UNSCHEDULED_CADENCE_SECONDS = 86400
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
        return profile.run_deadline(
            scheduled_for,
            timeout_seconds=self.timeout_seconds,
            backoffs=self.backoffs,
            interval_seconds=self.interval_seconds,
        )


@functools.lru_cache(maxsize=4096)
def _budget(cadence_seconds: int, overrides_json: str, monitoring_enabled: bool, timeout_seconds: int | None) -> Budget:
    derived = profile.derive_profile(cadence_seconds, json.loads(overrides_json))
    backoffs = derived.backoffs() if monitoring_enabled else ()
    timeout = timeout_seconds or profile.default_timeout_seconds(cadence_seconds)
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
            applied = store.apply_tenant(tenant.name, tenant.display_name or tenant.name, tenant.shadow, now)
            tenant_ids[tenant.name] = applied.id
            report.add(applied, tenant.name)
            if tenant.retention is not None:
                retention.set_tenant_retention(store, applied.id, tenant.retention, now)
        user_ids: dict[tuple[str, str], int] = {}
        for tenant_name, user in plan.users:
            applied = store.apply_user(tenant_ids[tenant_name], user.email, user.name or user.email, user.active, now)
            user_ids[(tenant_name, user.email)] = applied.id
            report.add(applied, f"{tenant_name}/{user.email}")
        env_ids: dict[tuple[str, str], int] = {}
        for tenant_name, env in plan.environments:
            applied = store.apply_environment(tenant_ids[tenant_name], env.name, env.python, env.idle_timeout_seconds, now)
            env_ids[(tenant_name, env.name)] = applied.id
            report.add(applied, f"{tenant_name}/{env.name}")
        for tenant_name, channel in plan.channels:
            report.add(store.apply_channel(
                tenant_ids[tenant_name], channel.name, kind=channel.kind, audience=channel.audience,
                config=channel.config, secret_ref=channel.secret_ref, now=now,
                severities=channel.routed_severities(), events=channel.routed_events(),
            ), f"{tenant_name}/{channel.name}")
        for channel in plan.platform_channels:
            report.add(store.apply_channel(
                None, channel.name, kind=channel.kind, audience=channel.audience,
                config=channel.config, secret_ref=channel.secret_ref, now=now,
                severities=channel.routed_severities(), events=channel.routed_events(),
            ), f"platform/{channel.name}")
        for planned in plan.workflows:
            spec = planned.spec
            tenant_id = tenant_ids[planned.tenant]
            label = f"{planned.tenant}/{spec.name}"
            if spec.archived and _already_archived(store, planned.tenant, spec.name, report):
                continue  # re-applying an archived workflow's file changes nothing
            existing = store.get_workflow_by_name(planned.tenant, spec.name)
            current = store.get_schedule_for_workflow(existing.id) if existing else None
            if current is not None and current.status == "paused" and spec.schedule.status == "active":
                # The file says active: applying it resumes a schedule someone paused by hand.
                report.warnings.append(f"{label} is paused; this file resumes it (set schedule.status: paused "
                                       "to keep it paused).")
            applied = store.apply_workflow(
                tenant_id, spec.name, now,
                description=spec.description,
                environment_id=env_ids[(planned.tenant, spec.environment)],
                publisher_id=user_ids[(planned.tenant, spec.publisher)],
                recipe=planned.recipe,
                timeout_seconds=spec.timeout_seconds,
                monitoring_enabled=spec.monitoring,
                policy_overrides=planned.policy,
                shadow=spec.shadow,
                expect_rows=spec.expect_rows,
                kind=spec.kind,
            )
            if maintenance.replace_file_windows(store, tenant_id, applied.id, planned.maintenance, now):
                report.changes.append({"kind": "maintenance", "name": label, "change": "updated"})
            if spec.archived and _archive(store, applied.id, "apply", now) is not None:
                applied = Applied(applied.kind, applied.id, "created" if applied.change == "created" else "updated")
            report.add(applied, label)
            report.add(store.apply_schedule(
                tenant_id=tenant_id, workflow_id=applied.id, cron=spec.schedule.cron,
                timezone=spec.schedule.timezone, status=spec.schedule.status,
                cadence_seconds=planned.cadence_seconds,
                starting_deadline_seconds=spec.schedule.starting_deadline_seconds, now=now,
            ), label)
        if dry_run:
            raise _DryRun
        if report.created or report.updated:
            _wake_trigger(store)  # sooner than its next pass; correct without it


def _wake_trigger(store: Store) -> None:
    """Wake whichever trigger runs: the built-in ticker, or the Kubernetes trigger's reconciler."""
    store.notify_wake("ticker")
    store.notify_wake("reconciler")


def _already_archived(store: Store, tenant: str, workflow: str, report: ApplyReport) -> bool:
    found = store.get_workflow_by_name(tenant, workflow)
    if found is None or found.archived_at is None:
        return False
    report.add(Applied("workflow", found.id, "unchanged"))
    schedule = store.get_schedule_for_workflow(found.id)
    if schedule is not None:
        report.add(Applied("schedule", schedule.id, "unchanged"))
    return True


def parse_ref(ref: str) -> tuple[str, str]:
    """Split `TENANT/WORKFLOW`; raise InvalidInput with one sentence otherwise."""
    tenant, sep, workflow = ref.strip().partition("/")
    if not sep or not tenant or not workflow or "/" in workflow:
        raise InvalidInput(f"Expected TENANT/WORKFLOW (for example acme/nightly), got {ref!r}.")
    return tenant, workflow


def find_tenant(store: Store, tenant: str) -> Tenant:
    found = store.get_tenant_by_name(tenant)
    if found is None:
        raise NotFound(f"No tenant named {tenant!r}.")
    return found


def find_workflow(store: Store, tenant: str, workflow: str) -> Workflow:
    """Return the workflow `tenant/workflow`; raise NotFound naming what is missing."""
    found = store.get_workflow_by_name(tenant, workflow)
    if found is None:
        find_tenant(store, tenant)
        raise NotFound(f"Tenant {tenant!r} has no workflow named {workflow!r}.")
    return found


def find_schedule(store: Store, tenant: str, workflow: str) -> tuple[Workflow, Schedule]:
    found = find_workflow(store, tenant, workflow)
    schedule = store.get_schedule_for_workflow(found.id)
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
    archived = store.archive_workflow(workflow_id, now)
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
        changed = store.set_schedule_status(schedule, status, now)
        if changed:
            _wake_trigger(store)
            if status == "paused":
                alerts.note_paused(store, found.id, actor, now)
        return changed or schedule


def run_now(db: Database, tenant: str, workflow: str, now: datetime, requested_by: str | None = None) -> Run:
    """Queue a manual run of a workflow through the same ledger and worker path as a tick."""
    with db.transaction() as store:
        found = find_workflow(store, tenant, workflow)
        if found.archived_at is not None:
            raise Conflict(f"Workflow {tenant}/{workflow} is archived; apply its file again to restore it.")
        if found.kind == "external":
            raise Conflict(f"Workflow {tenant}/{workflow} is external: its own scheduler runs it and reports "
                           "with `tickwarden checkin`.")
        schedule = store.get_schedule_for_workflow(found.id)
        cadence_seconds = schedule.cadence_seconds if schedule else UNSCHEDULED_CADENCE_SECONDS
        budget = budget_for(cadence_seconds, found.policy_overrides, found.monitoring_enabled, found.timeout_seconds)
        return store.create_manual_run(
            tenant_id=found.tenant_id,
            workflow_id=found.id,
            retry_budget=budget.retries,
            retry_backoff_seconds=list(budget.backoffs),
            deadline_at=budget.deadline(now),
            now=now,
            requested_by=requested_by,
        )


def cancel(db: Database, run_id: int, now: datetime, actor: str) -> Run:
    """Cancel a run in progress: the one path of the CLI, the API, the dashboard and scenarios.

    The run becomes `cancelled` with its actor and is never retried; its running
    attempt is stopped through the worker's abort path (the next lease renewal is
    refused). A run that already has a verdict is refused, so a cancel never rewrites
    history.
    """
    with db.transaction() as store:
        cancelled = store.cancel_run(run_id, actor, now)
        if cancelled is not None:
            return cancelled
        run = store.get_run(run_id)
        if run is None:
            raise NotFound(f"There is no run {run_id}.")
        raise Conflict(f"Run {run_id} is already {run.status}; only a run in progress can be cancelled.")


def list_runs(db: Database, tenant: str, workflow: str, limit: int = 50) -> list[Run]:
    """Return a workflow's runs, newest first."""
    if limit < 1:
        raise InvalidInput("The limit must be at least 1.")
    with db.transaction() as store:
        found = find_workflow(store, tenant, workflow)
        return store.list_runs(found.id, limit=limit)


def list_workflows(db: Database, tenant: str | None = None) -> list[WorkflowSummary]:
    """Return every workflow (of one tenant, when given) with its schedule and newest run."""
    with db.transaction() as store:
        if tenant is not None:
            find_tenant(store, tenant)
        return store.workflow_summaries(tenant)
