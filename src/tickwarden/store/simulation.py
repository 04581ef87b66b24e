"""Read-outs of a simulation's schema: runs, attempts, alerts and delivered notifications."""

from __future__ import annotations

from datetime import datetime
from typing import Any

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

    def sim_history(self) -> list[dict[str, Any]]:
        return self._rows("sim_history")

    def sim_create_channel(self, tenant_id: int | None, name: str, audience: str, now: datetime, kind: str = "recording") -> int:
        row = self._row(
            "sim_create_channel", {"tenant_id": tenant_id, "name": name, "kind": kind, "audience": audience, "now": now}
        )
        assert row is not None
        return int(row["id"])
