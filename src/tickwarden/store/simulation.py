"""Read-outs of a simulation's schema: runs, attempts, alerts and delivered notifications."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from tickwarden.models import Run, from_row
from tickwarden.store.base import StoreBase


class SimulationStore(StoreBase):
    def sim_runs(self) -> list[dict[str, Any]]:
        return self._rows("sim_runs")

    def sim_attempts(self) -> list[dict[str, Any]]:
        return self._rows("sim_attempts")

    def sim_alerts(self) -> list[dict[str, Any]]:
        return self._rows("sim_alerts")

    def sim_alert_events(self) -> list[dict[str, Any]]:
        return self._rows("sim_alert_events")

    def sim_notifications(self) -> list[dict[str, Any]]:
        return self._rows("sim_notifications")

    def sim_runs_by_id(self, run_ids: Sequence[int]) -> dict[int, Run]:
        rows = self._rows("sim_runs_by_id", {"run_ids": list(run_ids)})
        return {row["id"]: from_row(Run, row) for row in rows}

    def sim_renew_leases(self, attempt_ids: Sequence[int], worker_id: str, now: datetime, lease_seconds: float) -> int:
        return self._execute(
            "sim_renew_leases",
            {
                "attempt_ids": list(attempt_ids),
                "worker_id": worker_id,
                "now": now,
                "lease_expires_at": now + timedelta(seconds=lease_seconds),
            },
        )

    def sim_history(self) -> list[dict[str, Any]]:
        return self._rows("sim_history")

    def sim_create_channel(self, tenant_id: int | None, name: str, audience: str, now: datetime, kind: str = "recording") -> int:
        row = self._row(
            "sim_create_channel", {"tenant_id": tenant_id, "name": name, "kind": kind, "audience": audience, "now": now}
        )
        assert row is not None
        return int(row["id"])
