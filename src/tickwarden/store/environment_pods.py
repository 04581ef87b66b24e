"""Environments as pods: the warm state every worker and control-plane replica shares."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickwarden.models import Environment, from_row
from tickwarden.store.base import StoreBase


@dataclass(frozen=True)
class EnvironmentPod:
    """What tickwarden last asked of one environment's StatefulSet, and when it was last used."""

    environment_id: int
    tenant_id: int
    awake: bool
    last_used_at: datetime | None
    woken_at: datetime | None
    stopped_at: datetime | None
    wakes: int


@dataclass(frozen=True)
class DesiredPod:
    environment: Environment
    tenant: str
    awake: bool


class EnvironmentPodsRepository(StoreBase):
    def lock(self, environment_id: int, tenant_id: int) -> EnvironmentPod:
        """Create the row if needed and lock it until the transaction ends."""
        self._execute("environment_pods_ensure", {"environment_id": environment_id, "tenant_id": tenant_id})
        row = self._row("environment_pods_lock", {"environment_id": environment_id})
        assert row is not None
        return from_row(EnvironmentPod, row)

    def get(self, environment_id: int) -> EnvironmentPod | None:
        row = self._row("environment_pods_get", {"environment_id": environment_id})
        return from_row(EnvironmentPod, row) if row else None

    def mark_awake(self, environment_id: int, now: datetime) -> None:
        self._execute("environment_pods_mark_awake", {"environment_id": environment_id, "now": now})

    def touch(self, environment_id: int, now: datetime) -> None:
        self._execute("environment_pods_touch", {"environment_id": environment_id, "now": now})

    def idle(self, now: datetime, limit: int) -> list[tuple[int, int]]:
        return [(r["environment_id"], r["tenant_id"]) for r in self._rows("environment_pods_idle",
                                                                          {"now": now, "limit": limit})]

    def mark_stopped(self, environment_id: int, now: datetime) -> None:
        self._execute("environment_pods_mark_stopped", {"environment_id": environment_id, "now": now})

    def desired(self) -> list[DesiredPod]:
        out = []
        for row in self._rows("environment_pods_desired"):
            tenant, awake = row.pop("tenant"), row.pop("awake")
            out.append(DesiredPod(from_row(Environment, row), tenant, awake))
        return out
