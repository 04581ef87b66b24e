"""Maintenance windows and the deliveries they hold; the policy lives in `tickwarden.maintenance` and `holds`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tickwarden.models import Window, WindowSpec, from_row
from tickwarden.store.base import StoreBase


@dataclass(frozen=True)
class HeldAlert:
    alert_id: int
    workflow_id: int
    status: str


@dataclass(frozen=True)
class HeldRow:
    id: int
    alert_id: int
    channel_id: int
    event_id: int
    kind: str
    heard: bool


@dataclass(frozen=True)
class EscalationCandidate:
    id: int
    workflow_id: int
    opened_at: datetime
    cadence_seconds: int
    escalation_multiplier: float
    escalate_at: datetime


def _window(row: dict[str, Any]) -> Window:
    return from_row(Window, row)


class MaintenanceRepository(StoreBase):
    def insert(self, tenant_id: int, workflow_id: int | None, source: str, spec: WindowSpec,
                           created_by: str, now: datetime) -> Window:
        row = self._row("maintenance_insert", {
            "tenant_id": tenant_id, "workflow_id": workflow_id, "source": source, "starts_at": spec.starts_at,
            "ends_at": spec.ends_at, "cron": spec.cron, "timezone": spec.timezone,
            "duration_seconds": spec.duration_seconds, "note": spec.note, "created_by": created_by, "now": now,
        })
        assert row is not None
        return _window(row)

    def get(self, window_id: int) -> Window | None:
        row = self._row("maintenance_get", {"id": window_id})
        return _window(row) if row else None

    def windows(self, tenant: str | None = None) -> list[Window]:
        return [_window(r) for r in self._rows("maintenance_windows", {"tenant": tenant})]

    def delete(self, window_id: int) -> bool:
        return self._execute("maintenance_delete", {"id": window_id}) > 0

    def delete_file_windows(self, workflow_id: int) -> int:
        return self._execute("maintenance_delete_file_windows", {"workflow_id": workflow_id})

    def for_workflows(self, workflow_ids: Sequence[int]) -> dict[int, list[Window]]:
        """The windows applying to each workflow (its own and its tenant's), by workflow id."""
        found: dict[int, list[Window]] = {}
        if not workflow_ids:
            return found
        for row in self._rows("maintenance_for_workflows", {"workflow_ids": list(set(workflow_ids))}):
            found.setdefault(row["applies_to"], []).append(_window(row))
        return found

    def hold_outbox(self, holds: Sequence[tuple[int, datetime]]) -> int:
        if not holds:
            return 0
        return self._execute("maintenance_hold_outbox", {"ids": [i for i, _ in holds],
                                                         "untils": [u for _, u in holds]})

    def claim_held_alerts(self, now: datetime, limit: int) -> list[HeldAlert]:
        return [HeldAlert(**r) for r in self._rows("maintenance_claim_held_alerts", {"now": now, "limit": limit})]

    def held_rows(self, alert_ids: Sequence[int]) -> list[HeldRow]:
        return [HeldRow(**r) for r in self._rows("maintenance_held_rows", {"alert_ids": list(alert_ids)})]

    def extend_holds(self, alert_ids: Sequence[int], until: datetime) -> int:
        return self._execute("maintenance_extend_holds", {"alert_ids": list(alert_ids), "until": until})

    def release_outbox(self, alert_ids: Sequence[int], release_ids: Sequence[int], now: datetime) -> int:
        return self._execute("maintenance_release_outbox", {"alert_ids": list(alert_ids),
                                                            "release_ids": list(release_ids), "now": now})

    def escalation_candidates(self, now: datetime, limit: int) -> list[EscalationCandidate]:
        rows = self._rows("maintenance_escalation_candidates", {"now": now, "limit": limit})
        return [EscalationCandidate(**r) for r in rows]

    def defer_escalation(self, alert_id: int, old: datetime, escalate_at: datetime) -> bool:
        return bool(self._rows("maintenance_defer_escalation", {"id": alert_id, "old": old,
                                                                "escalate_at": escalate_at}))
