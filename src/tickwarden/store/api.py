"""Read paths and small writes of the API and dashboard, and the tenant context they run in.

`enter_tenant_context` is what makes row-level security bite: it switches the
transaction to the role `tickwarden_app` and names the tenant (or the platform)
whose rows the rest of the transaction may see. Every other query here is written
as if it saw every tenant; the database filters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


from tickwarden.store.environment_pods import EnvironmentPod
from tickwarden.models import (
    Alert,
    AlertView,
    AlertEvent,
    AttemptStep,
    Channel,
    Environment,
    EnvironmentInstance,
    Heartbeat,
    Run,
    Tenant,
    User,
    Workflow,
    from_row,
)
from tickwarden.store.base import StoreBase


@dataclass(frozen=True)
class ApiToken:
    id: int
    tenant_id: int | None
    user_id: int | None
    name: str
    role: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    tenant_name: str | None = None


@dataclass(frozen=True)
class WorkflowView:
    """A workflow with its schedule and names, as the API shows it."""

    workflow: Workflow
    tenant_name: str
    environment_name: str | None
    cron: str | None
    timezone: str | None
    schedule_status: str | None
    cadence_seconds: int | None
    schedule_version: int | None
    published_at: datetime | None
    publisher_email: str | None = None
    starting_deadline_seconds: int | None = None


@dataclass(frozen=True)
class Outcome:
    workflow_id: int
    id: int
    scheduled_for: datetime
    status: str
    recovered: bool
    manual: bool


@dataclass(frozen=True)
class RunView:
    run: Run
    tenant_name: str
    workflow_name: str


@dataclass(frozen=True)
class FailingStep:
    attempt_id: int
    number: int
    run_id: int
    step: str | None
    log: str
    error: str | None
    error_category: str | None


@dataclass(frozen=True)
class EnvironmentView:
    environment: Environment
    tenant_name: str
    live_instances: int = 0
    pod_state: EnvironmentPod | None = None  # runtime kubernetes only; asleep and never woken until its first wake


def _environment_view(row: dict[str, Any], live_instances: int = 0) -> EnvironmentView:
    environment = from_row(Environment, row)
    pod_state = None
    if environment.runtime == "kubernetes":
        pod_state = EnvironmentPod(environment.id, environment.tenant_id, bool(row["pod_awake"]),
                                   row["pod_last_used_at"], row["pod_woken_at"], row["pod_stopped_at"],
                                   int(row["pod_wakes"] or 0))
    return EnvironmentView(environment, row["tenant_name"], live_instances, pod_state)


@dataclass(frozen=True)
class TenantOverview:
    id: int
    name: str
    display_name: str
    workflows: int
    open_alerts: int
    worst_severity: str
    oldest_open_at: datetime | None
    failures: int


@dataclass(frozen=True)
class UndeliveredChannel:
    """A channel's notifications not yet delivered: the backlog a transport outage leaves."""

    channel: str
    kind: str
    tenant: str | None
    waiting: int
    retrying: int
    given_up: int
    oldest: datetime
    tries: int
    last_error: str | None

    @property
    def failing(self) -> bool:
        return self.retrying > 0 or self.given_up > 0


@dataclass(frozen=True)
class OperationsSnapshot:
    """What /metrics reports, read in one transaction."""

    runs_in_flight: dict[str, int]
    tenant_last_success: dict[int, datetime | None]
    open_alerts: dict[str, int]
    oldest_unprocessed: datetime | None
    outbox: dict[str, int]
    heartbeats: list[Heartbeat]


class ApiRepository(StoreBase):
    # -- tenant context -------------------------------------------------------------

    def enter_tenant_context(self, tenant_id: int | None, *, platform: bool) -> None:
        """Run the rest of this transaction as tickwarden_app, seeing one tenant or all of them."""
        if not platform and tenant_id is None:
            raise ValueError("a tenant context needs a tenant or the platform")
        self._execute("api_enter_app_role")
        self._execute(
            "api_set_tenant_context",
            {"tenant_id": "" if tenant_id is None else str(int(tenant_id)), "platform": "on" if platform else "off"},
        )

    # -- tokens ---------------------------------------------------------------------

    def create_api_token(
        self, *, tenant_id: int | None, role: str, name: str, token_hash: str, now: datetime, user_id: int | None = None
    ) -> ApiToken:
        row = self._row(
            "api_create_token",
            {"tenant_id": tenant_id, "user_id": user_id, "name": name, "role": role, "token_hash": token_hash, "now": now},
        )
        assert row is not None
        return from_row(ApiToken, row)

    def find_api_token(self, token_hash: str) -> ApiToken | None:
        row = self._row("api_find_token", {"token_hash": token_hash})
        return from_row(ApiToken, row) if row else None

    def touch_api_token(self, token_id: int, now: datetime) -> None:
        self._execute("api_touch_token", {"token_id": token_id, "now": now})

    def list_api_tokens(self) -> list[ApiToken]:
        return [from_row(ApiToken, row) for row in self._rows("api_list_tokens")]

    def revoke_api_token(self, token_id: int, now: datetime) -> bool:
        return self._row("api_revoke_token", {"token_id": token_id, "now": now}) is not None

    # -- catalog --------------------------------------------------------------------

    def list_tenants(self, after: str | None, limit: int) -> list[Tenant]:
        return [from_row(Tenant, r) for r in self._rows("api_list_tenants", {"after": after, "limit": limit})]

    def list_workflows(
        self, *, tenant: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[WorkflowView]:
        rows = self._rows(
            "api_list_workflows",
            {
                "tenant": tenant,
                "after_tenant": after[0] if after else None,
                "after_name": after[1] if after else None,
                "limit": limit,
            },
        )
        return [_workflow_view(r) for r in rows]

    def get_workflow(self, tenant: str, workflow: str) -> WorkflowView | None:
        row = self._row("api_get_workflow", {"tenant": tenant, "workflow": workflow})
        return _workflow_view(row) if row else None

    def get_environment_by_name(self, tenant: str, environment: str) -> Environment | None:
        row = self._row("api_get_environment_by_name", {"tenant": tenant, "environment": environment})
        return from_row(Environment, row) if row else None

    def get_user_by_email(self, tenant: str, email: str) -> User | None:
        row = self._row("api_get_user_by_email", {"tenant": tenant, "email": email})
        return from_row(User, row) if row else None

    def recent_outcomes(self, workflow_ids: Sequence[int], per_workflow: int) -> dict[int, list[Outcome]]:
        found: dict[int, list[Outcome]] = {wid: [] for wid in workflow_ids}
        if not workflow_ids:
            return found
        rows = self._rows("api_recent_outcomes", {"workflow_ids": list(workflow_ids), "per_workflow": per_workflow})
        for row in rows:
            found[row["workflow_id"]].append(from_row(Outcome, row))
        return found

    # -- runs -----------------------------------------------------------------------

    def list_runs(self, workflow_id: int, before: tuple[datetime, int] | None, limit: int) -> list[Run]:
        rows = self._rows(
            "api_list_runs",
            {
                "workflow_id": workflow_id,
                "before_at": before[0] if before else None,
                "before_id": before[1] if before else None,
                "limit": limit,
            },
        )
        return [from_row(Run, r) for r in rows]

    def get_run(self, run_id: int) -> RunView | None:
        row = self._row("api_get_run", {"run_id": run_id})
        if not row:
            return None
        return RunView(run=from_row(Run, row), tenant_name=row["tenant_name"], workflow_name=row["workflow_name"])

    def run_credential_attempt(self, tenant: str, workflow: str, scheduled_for: datetime,
                               attempt: int) -> tuple[int, bool] | None:
        """The run and whether the attempt still runs, for the attempt a run credential names."""
        row = self._row("api_run_credential_attempt", {"tenant": tenant, "workflow": workflow,
                                                       "scheduled_for": scheduled_for, "attempt": attempt})
        return (int(row["run_id"]), bool(row["running"])) if row else None

    def list_run_steps(self, run_id: int, scheduled_for: datetime | None = None) -> list[AttemptStep]:
        """What a run's steps did; given its tick, only its month is read."""
        if scheduled_for is None:
            rows = self._rows("api_list_run_steps", {"run_id": run_id})
        else:
            rows = self._rows("api_list_run_steps_in_month", {"run_id": run_id, "scheduled_for": scheduled_for})
        return [from_row(AttemptStep, r) for r in rows]

    # -- alerts ---------------------------------------------------------------------

    def list_alerts(
        self,
        *,
        status: str | None = None,
        severity: str | None = None,
        owner: str | None = None,
        tenant: str | None = None,
        workflow: str | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[AlertView]:
        rows = self._rows(
            "api_list_alerts",
            {
                "status": status,
                "severity": severity,
                "owner": owner,
                "tenant": tenant,
                "workflow": workflow,
                "before_id": before_id,
                "limit": limit,
            },
        )
        return [_alert_view(r) for r in rows]

    def get_alert(self, alert_id: int) -> AlertView | None:
        row = self._row("api_get_alert", {"alert_id": alert_id})
        return _alert_view(row) if row else None

    def list_alert_events(self, alert_id: int) -> list[AlertEvent]:
        return [from_row(AlertEvent, r) for r in self._rows("api_list_alert_events", {"alert_id": alert_id})]

    def failing_step(self, alert_id: int) -> FailingStep | None:
        row = self._row("api_failing_step", {"alert_id": alert_id})
        return from_row(FailingStep, row) if row else None

    def list_environments(self, *, tenant: str | None, after_id: int | None, limit: int) -> list[EnvironmentView]:
        rows = self._rows("api_list_environments", {"tenant": tenant, "after_id": after_id, "limit": limit})
        return [_environment_view(r, int(r["live_instances"])) for r in rows]

    def list_environment_pods(self) -> list[EnvironmentView]:
        return [_environment_view(r) for r in self._rows("api_list_environment_pods")]

    def get_environment(self, environment_id: int) -> EnvironmentView | None:
        row = self._row("api_get_environment", {"environment_id": environment_id})
        return _environment_view(row) if row else None

    def list_environment_instances(self, environment_id: int) -> list[EnvironmentInstance]:
        rows = self._rows("api_list_environment_instances", {"environment_id": environment_id})
        return [from_row(EnvironmentInstance, r) for r in rows]

    def list_channels(self, *, tenant: str | None, after_id: int | None, limit: int) -> list[Channel]:
        rows = self._rows("api_list_channels", {"tenant": tenant, "after_id": after_id, "limit": limit})
        return [from_row(Channel, r) for r in rows]

    def get_channel(self, channel_id: int) -> Channel | None:
        row = self._row("api_get_channel", {"channel_id": channel_id})
        return from_row(Channel, row) if row else None

    # -- overview and operations ----------------------------------------------------

    def overview_tenants(self, limit: int = 500) -> list[TenantOverview]:
        return [from_row(TenantOverview, r) for r in self._rows("api_overview_tenants", {"limit": limit})]

    def open_alerts(self, limit: int = 500) -> list[AlertView]:
        return [_alert_view(r) for r in self._rows("api_open_alerts", {"limit": limit})]

    def loop_heartbeats(self) -> list[Heartbeat]:
        return [from_row(Heartbeat, r) for r in self._rows("api_loop_heartbeats")]

    def undelivered_notifications(self, since: datetime, limit: int = 50) -> list[UndeliveredChannel]:
        """Channels with undelivered notifications, failing ones first; given-up rows count from `since`."""
        rows = self._rows("api_undelivered_notifications", {"since": since, "limit": limit})
        return [from_row(UndeliveredChannel, r) for r in rows]

    def operations_snapshot(self) -> OperationsSnapshot:
        lag = self._row("api_metrics_poll_lag")
        return OperationsSnapshot(
            runs_in_flight={r["status"]: int(r["n"]) for r in self._rows("api_metrics_runs_in_flight")},
            tenant_last_success={int(r["tenant_id"]): r["last_success_at"]
                                 for r in self._rows("api_metrics_tenant_last_success")},
            open_alerts={r["severity"]: int(r["n"]) for r in self._rows("api_metrics_open_alerts")},
            oldest_unprocessed=lag["oldest"] if lag else None,
            outbox={r["status"]: int(r["n"]) for r in self._rows("api_metrics_outbox")},
            heartbeats=self.loop_heartbeats(),
        )

    def sees_every_tenant(self) -> bool:
        """True when this connection, outside a tenant context, sees every tenant (what the loops need)."""
        row = self._row("api_connection_context")
        return bool(row and (row["bypasses_rls"] or row["platform"]))


def _workflow_view(row: dict[str, Any]) -> WorkflowView:
    return WorkflowView(
        workflow=from_row(Workflow, row),
        tenant_name=row["tenant_name"],
        environment_name=row["environment_name"],
        cron=row["cron"],
        timezone=row["timezone"],
        schedule_status=row["schedule_status"],
        cadence_seconds=row["cadence_seconds"],
        schedule_version=row["schedule_version"],
        published_at=row["published_at"],
        publisher_email=row["publisher_email"],
        starting_deadline_seconds=row["starting_deadline_seconds"],
    )


def _alert_view(row: dict[str, Any]) -> AlertView:
    return AlertView(alert=from_row(Alert, row), tenant_name=row["tenant_name"], workflow_name=row["workflow_name"])
