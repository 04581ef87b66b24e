"""Execution operations: attempt steps, released leases and environment instances."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from tickwarden.models import Environment, EnvironmentInstance, User, Workflow, from_row
from tickwarden.store.base import StoreBase

@dataclass(frozen=True)
class ExecutionContext:
    """What a worker needs to run an attempt: the workflow, its cadence, publisher and environment."""

    workflow: Workflow
    cadence_seconds: int | None
    publisher: User | None
    environment: Environment | None
    tenant_name: str | None = None  # the run key's tenant part, so a run needing no secret needs no second look


def _prefixed(row: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    found = {k[len(prefix):]: v for k, v in row.items() if k.startswith(prefix)}
    return found if found.get("id") is not None else None


class ExecutionRepository(StoreBase):
    def relax_commit(self) -> None:
        self._execute("execution_relax_commit")

    def restore_commit(self) -> None:
        self._execute("execution_restore_commit")

    def context(self, workflow_id: int, now: datetime) -> ExecutionContext | None:
        """Load a workflow with what running it needs; a workflow without environment gets `default`."""
        row = self._row("execution_context", {"workflow_id": workflow_id})
        if row is None:
            return None
        publisher = _prefixed(row, "publisher__")
        environment = _prefixed(row, "environment__")
        workflow = from_row(Workflow, row)
        env = from_row(Environment, environment) if environment else None
        if env is None and workflow.environment_id is None:
            env = self.ensure_default_environment(workflow.tenant_id, now)
        return ExecutionContext(
            workflow=workflow,
            cadence_seconds=row["schedule__cadence_seconds"],
            publisher=from_row(User, publisher) if publisher else None,
            environment=env,
            tenant_name=row["tenant__name"],
        )

    def ensure_default_environment(self, tenant_id: int, now: datetime) -> Environment:
        """Return the tenant's `default` environment, creating it once."""
        row = self._row("execution_ensure_default_environment", {"tenant_id": tenant_id, "now": now})
        assert row is not None
        return from_row(Environment, row)

    def record_attempt_steps(self, attempt_id: int, tenant_id: int, steps: list[dict[str, Any]]) -> int:
        """Write the per-step rows of an attempt; return how many were new."""
        if not steps:
            return 0
        return self._execute(
            "execution_record_attempt_steps", {"attempt_id": attempt_id, "tenant_id": tenant_id, "steps": Jsonb(steps)}
        )

    def release_attempt(self, attempt_id: int, worker_id: str) -> bool:
        """Put a leased attempt back in the queue; False when this worker no longer held it."""
        return self._row("execution_release_attempt", {"attempt_id": attempt_id, "worker_id": worker_id}) is not None

    def start_environment_instance(
        self, *, tenant_id: int, environment_id: int, worker_id: str, pid: int | None, status: str, now: datetime
    ) -> EnvironmentInstance:
        row = self._row(
            "execution_start_environment_instance",
            {"tenant_id": tenant_id, "environment_id": environment_id, "worker_id": worker_id, "pid": pid,
             "status": status, "now": now},
        )
        assert row is not None
        return from_row(EnvironmentInstance, row)

    def update_environment_instance(
        self, instance_id: int, status: str, now: datetime, *, pid: int | None = None, served: int = 0,
        relaxed: bool = False,
    ) -> EnvironmentInstance | None:
        """Move an instance to `status`; `relaxed` only on a statement that is its own transaction."""
        row = self._row(
            "execution_update_environment_instance",
            {"instance_id": instance_id, "status": status, "now": now, "pid": pid, "served": served,
             "relaxed": relaxed},
        )
        return from_row(EnvironmentInstance, row) if row else None

    def abandon_environment_instances(self, now: datetime, grace_seconds: int = 300) -> int:
        """Mark dead the idle instances whose worker vanished without stopping them."""
        return len(self._rows("execution_abandon_environment_instances", {"now": now, "grace_seconds": grace_seconds}))

    def reaper_server_started(self) -> datetime:
        """When the database server last started."""
        row = self._row("execution_reaper_server_started", {})
        assert row is not None
        started: datetime = row["started"]
        return started

    def reaper_waiting(self, now: datetime, grace_seconds: int = 300) -> bool:
        """Whether a lease reaper pass would find an expired lease or an abandoned instance."""
        row = self._row("execution_reaper_waiting", {"now": now, "grace_seconds": grace_seconds})
        return bool(row and row["found"])

    def list_environment_instances(self, *, include_stopped: bool = False, limit: int = 200) -> list[EnvironmentInstance]:
        rows = self._rows("execution_list_environment_instances", {"include_stopped": include_stopped, "limit": limit})
        return [from_row(EnvironmentInstance, r) for r in rows]
