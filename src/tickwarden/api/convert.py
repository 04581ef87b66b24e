"""Store dataclasses → response bodies (shared by the API routers and the dashboard)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tickwarden import profile
from tickwarden.api import schemas as s
from tickwarden.cadence import parse_schedule
from tickwarden.errors import InvalidPolicy
from tickwarden.models import Alert, AlertEvent, AlertView, Attempt, AttemptStep, Channel, EnvironmentInstance, Run
from tickwarden.sanitize import redact
from tickwarden.workflow_file import ScheduleSpec
from tickwarden.store.api import (
    EnvironmentView,
    FailingStep,
    Outcome,
    WorkflowView,
)


def _clean(text: str | None) -> str | None:
    """Redact again on the way out: logs were sanitized when stored, this guards rows written otherwise."""
    return None if text is None else "\n".join(redact(line) for line in text.splitlines())


def derived_profile(view: WorkflowView) -> profile.Profile | None:
    """Return the workflow's profile, or None without a schedule (or with overrides no longer valid)."""
    if view.cadence_seconds is None:
        return None
    try:
        return profile.derive_profile(view.cadence_seconds, view.workflow.policy_overrides)
    except InvalidPolicy:
        return None


def profile_out(derived: profile.Profile | None) -> s.ProfileOut | None:
    return s.ProfileOut(**derived.as_dict()) if derived else None


def workflow_out(view: WorkflowView, now: datetime | None = None,
                 maintenance: list[dict[str, Any]] | None = None) -> s.WorkflowOut:
    return s.WorkflowOut(**_workflow_fields(view, now, maintenance))


def workflow_detail_out(view: WorkflowView, recent: list[Outcome], now: datetime | None = None,
                        maintenance: list[dict[str, Any]] | None = None) -> s.WorkflowDetailOut:
    return s.WorkflowDetailOut(
        **_workflow_fields(view, now, maintenance),
        recent=[s.OutcomeOut(run_id=o.id, scheduled_for=o.scheduled_for, status=o.status,
                             recovered=o.recovered, manual=o.manual) for o in recent],
    )


def next_fire_at(view: WorkflowView, now: datetime | None) -> datetime | None:
    """The schedule's next tick after `now`: none when paused, archived or unscheduled."""
    if now is None or view.cron is None or view.schedule_status != "active" or view.workflow.archived_at is not None:
        return None
    return parse_schedule(view.cron, view.timezone or "UTC").next_after(now)


def _workflow_fields(view: WorkflowView, now: datetime | None = None,
                     maintenance: list[dict[str, Any]] | None = None) -> dict:
    """The workflow file's fields under the file's names (what PUT takes back), then the read-only facts."""
    w = view.workflow
    schedule = None
    if view.cron is not None:
        schedule = ScheduleSpec(cron=view.cron, timezone=view.timezone or "UTC",
                                status="paused" if view.schedule_status == "paused" else "active",
                                starting_deadline_seconds=view.starting_deadline_seconds or 300)
    return dict(
        tenant=view.tenant_name, name=w.name, description=w.description, environment=view.environment_name,
        publisher=view.publisher_email, schedule=schedule, timeout_seconds=w.timeout_seconds,
        monitoring=w.monitoring_enabled, policy=w.policy_overrides, shadow=w.shadow,
        archived=w.archived_at is not None, expect_rows=w.expect_rows, keep_outputs=w.keep_outputs, steps=list(w.recipe.get("steps", [])),
        kind=w.kind, maintenance=maintenance or [], id=w.id, cadence_seconds=view.cadence_seconds, schedule_version=view.schedule_version,
        published_at=view.published_at, profile=profile_out(derived_profile(view)),
        next_fire_at=next_fire_at(view, now), archived_at=w.archived_at, created_at=w.created_at,
        updated_at=w.updated_at,
    )


def run_out(run: Run, tenant: str, workflow: str) -> s.RunOut:
    return s.RunOut(**_run_fields(run, tenant, workflow))


def _run_fields(run: Run, tenant: str, workflow: str) -> dict:
    return dict(
        id=run.id, tenant=tenant, workflow=workflow, scheduled_for=run.scheduled_for, manual=run.manual,
        status=run.status, recovered=run.recovered, retry_budget=run.retry_budget, attempts_count=run.attempts_count,
        deadline_at=run.deadline_at, error_category=run.error_category, error=run.error, failed_step=run.failed_step,
        requested_by=run.requested_by, created_at=run.created_at, started_at=run.started_at,
        finished_at=run.finished_at, rows=run.rows, cancelled_by=run.cancelled_by,
    )


def run_detail_out(run: Run, tenant: str, workflow: str, attempts: list[Attempt],
                   steps: list[AttemptStep]) -> s.RunDetailOut:
    by_attempt: dict[int, list[s.StepOut]] = {}
    for step in steps:
        by_attempt.setdefault(step.attempt_id, []).append(s.StepOut(
            step=step.step, position=step.position, status=step.status, started_at=step.started_at,
            finished_at=step.finished_at, log=_clean(step.log) or "", error=_clean(step.error)))
    return s.RunDetailOut(
        **_run_fields(run, tenant, workflow),
        attempts=[s.AttemptOut(
            id=a.id, number=a.number, status=a.status, worker_id=a.worker_id, queued_at=a.queued_at,
            started_at=a.started_at, finished_at=a.finished_at, retryable=a.retryable,
            error_category=a.error_category, error=_clean(a.error), failed_step=a.failed_step, log_tail=_clean(a.log_tail),
            steps=by_attempt.get(a.id, [])) for a in attempts],
    )


def alert_out(view: AlertView) -> s.AlertOut:
    return s.AlertOut(**_alert_fields(view.alert, view.tenant_name, view.workflow_name))


def _alert_fields(a: Alert, tenant: str, workflow: str) -> dict:
    return dict(
        id=a.id, tenant=tenant, workflow=workflow, status=a.status, first_severity=a.first_severity,
        severity=a.severity, owner=a.owner, failure_count=a.failure_count, cadence_seconds=a.cadence_seconds,
        escalate_at=a.escalate_at, shadow=a.shadow, first_failure_at=a.first_failure_at,
        last_failure_at=a.last_failure_at, last_run_id=a.last_run_id, last_error_category=a.last_error_category,
        last_error=a.last_error, failed_step=a.failed_step, opened_at=a.opened_at, escalated_at=a.escalated_at,
        resolved_at=a.resolved_at, resolved_by_run_id=a.resolved_by_run_id, downtime_seconds=a.downtime_seconds,
        acknowledged_at=a.acknowledged_at, acknowledged_by=a.acknowledged_by, snoozed_until=a.snoozed_until,
        reason=a.reason,
    )


def event_out(e: AlertEvent) -> s.AlertEventOut:
    return s.AlertEventOut(id=e.id, kind=e.kind, at=e.at, severity=e.severity, owner=e.owner, actor=e.actor,
                           note=e.note, data=e.data, internal=e.internal)


def alert_detail_out(view: AlertView, events: list[AlertEvent], failing: FailingStep | None) -> s.AlertDetailOut:
    step = None
    if failing is not None:
        step = s.FailingStepOut(run_id=failing.run_id, attempt=failing.number, step=failing.step,
                                error_category=failing.error_category, error=_clean(failing.error), log=_clean(failing.log) or "")
    return s.AlertDetailOut(**_alert_fields(view.alert, view.tenant_name, view.workflow_name),
                            events=[event_out(e) for e in events], failing_step=step)


def environment_out(view: EnvironmentView) -> s.EnvironmentOut:
    return s.EnvironmentOut(**_environment_fields(view))


def _environment_fields(view: EnvironmentView) -> dict:
    e = view.environment
    pod = None
    if view.pod_state is not None:
        given, state = e.pod or {}, view.pod_state
        pod = s.EnvironmentPodOut(image=given.get("image"), resources=dict(given.get("resources") or {}),
                                  volume=given.get("volume"), awake=state.awake, last_used_at=state.last_used_at,
                                  woken_at=state.woken_at, stopped_at=state.stopped_at, wakes=state.wakes)
    return dict(id=e.id, tenant=view.tenant_name, name=e.name, python=e.python,
                idle_timeout_seconds=e.idle_timeout_seconds, settings=e.settings, runtime=e.runtime, pod=pod,
                live_instances=view.live_instances, created_at=e.created_at, updated_at=e.updated_at)


def environment_detail_out(view: EnvironmentView, instances: list[EnvironmentInstance]) -> s.EnvironmentDetailOut:
    live = sum(1 for i in instances if i.status in ("starting", "warm", "busy"))
    fields = _environment_fields(view) | {"live_instances": live}
    return s.EnvironmentDetailOut(**fields, instances=[
        s.EnvironmentInstanceOut(id=i.id, worker_id=i.worker_id, pid=i.pid, status=i.status, started_at=i.started_at,
                                 last_used_at=i.last_used_at, stopped_at=i.stopped_at, runs_served=i.runs_served)
        for i in instances])


def channel_out(c: Channel) -> s.ChannelOut:
    return s.ChannelOut(id=c.id, tenant=c.tenant, name=c.name, kind=c.kind, audience=c.audience, config=c.config,
                        has_secret=c.secret_ref is not None, enabled=c.enabled, disabled_reason=c.disabled_reason,
                        created_at=c.created_at)
