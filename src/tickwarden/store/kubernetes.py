"""Kubernetes trigger operations: the schedules the reconciler converges CronJobs to, and the tick pod's writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwarden.models import Attempt, from_row
from tickwarden.store.base import StoreBase


@dataclass(frozen=True)
class DesiredCronJob:
    """One schedule as the reconciler sees it: what its CronJob must say, or that it must go."""

    schedule_id: int
    version: int
    cron: str
    timezone: str
    status: str
    starting_deadline_seconds: int
    tenant: str
    workflow: str
    archived: bool


@dataclass(frozen=True)
class TickContext:
    """A schedule with what a tick of it needs: its state, cron, budget inputs and last edit."""

    schedule_id: int
    tenant_id: int
    workflow_id: int
    cron: str
    timezone: str
    status: str
    version: int
    starting_deadline_seconds: int
    cadence_seconds: int
    updated_at: datetime
    archived: bool
    monitoring_enabled: bool
    timeout_seconds: int | None
    policy_overrides: str
    kind: str = "managed"
    environment_runtime: str = "process"


@dataclass(frozen=True)
class QueuedRetry:
    """A retry attempt waiting to run, with the names its Job is labelled with."""

    attempt_id: int
    run_id: int
    number: int
    tenant: str
    workflow: str


class KubernetesRepository(StoreBase):
    def desired_cronjobs(self) -> list[DesiredCronJob]:
        return [DesiredCronJob(**row) for row in self._rows("kubernetes_desired_cronjobs")]

    def tick_context(self, schedule_id: int) -> TickContext | None:
        row = self._row("kubernetes_tick_context", {"schedule_id": schedule_id})
        return TickContext(**row) if row else None

    def lease_tick_attempt(
        self, workflow_id: int, scheduled_for: datetime, worker_id: str, now: datetime, lease_seconds: float
    ) -> Attempt | None:
        """Lease the queued attempt of the tick's run; None when there is none to take."""
        row = self._row(
            "kubernetes_lease_tick_attempt",
            {"workflow_id": workflow_id, "scheduled_for": scheduled_for, "worker_id": worker_id, "now": now,
             "lease_expires_at": now + timedelta(seconds=lease_seconds)},
        )
        return from_row(Attempt, row) if row else None

    def queued_retries(self, now: datetime, limit: int) -> list[QueuedRetry]:
        return [QueuedRetry(**row) for row in self._rows("kubernetes_queued_retries", {"now": now, "limit": limit})]

    def lease_attempt(self, attempt_id: int, worker_id: str, now: datetime,
                                 lease_seconds: float) -> Attempt | None:
        """Lease one queued attempt by id; None when it is not queued (or not yet due)."""
        row = self._row("kubernetes_lease_attempt",
                        {"attempt_id": attempt_id, "worker_id": worker_id, "now": now,
                         "lease_expires_at": now + timedelta(seconds=lease_seconds)})
        return from_row(Attempt, row) if row else None
