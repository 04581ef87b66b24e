"""The dashboard's reads over a time window: a workflow's history, the runs list, the overview's charts.

Each method takes the window explicitly (`since`, `until`) and a row limit, so a page
reads what its window holds and no more. The caller's tenant context (row-level
security) decides what is visible, exactly as for the API's reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tickwarden.models import AlertView, from_row
from tickwarden.store.api import _alert_view
from tickwarden.store.base import StoreBase


@dataclass(frozen=True)
class RunPoint:
    """One run as the timeline, the duration chart and the runs list show it."""

    id: int
    scheduled_for: datetime
    status: str
    recovered: bool
    manual: bool
    started_at: datetime | None
    finished_at: datetime | None
    attempts_count: int
    error_category: str | None
    requested_by: str | None
    tenant_name: str | None = None
    workflow_name: str | None = None

    @property
    def duration_seconds(self) -> float | None:
        """Wall time from the first start to the verdict; None until the run has both."""
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, (self.finished_at - self.started_at).total_seconds())

    @property
    def in_progress(self) -> bool:
        return self.status in ("queued", "running", "pending_retry")


@dataclass(frozen=True)
class LastSuccess:
    id: int
    scheduled_for: datetime
    finished_at: datetime | None


class DashboardRepository(StoreBase):
    def workflow_runs(self, workflow_id: int, since: datetime, until: datetime, limit: int) -> list[RunPoint]:
        rows = self._rows("dashboard_workflow_runs",
                          {"workflow_id": workflow_id, "since": since, "until": until, "limit": limit})
        return [from_row(RunPoint, r) for r in rows]

    def last_success(self, workflow_id: int) -> LastSuccess | None:
        row = self._row("dashboard_last_success", {"workflow_id": workflow_id})
        return from_row(LastSuccess, row) if row else None

    def runs(self, *, since: datetime, until: datetime, tenant: str | None, status: str | None,
                  limit: int) -> list[RunPoint]:
        rows = self._rows("dashboard_runs", {"since": since, "until": until, "tenant": tenant, "status": status,
                                        "limit": limit})
        return [from_row(RunPoint, r) for r in rows]

    def failure_buckets(self, since: datetime, until: datetime, bucket: timedelta) -> dict[datetime, int]:
        return _buckets(self._rows("dashboard_failure_buckets", {"since": since, "until": until, "bucket": bucket}))

    def alert_buckets(self, since: datetime, until: datetime, bucket: timedelta) -> dict[datetime, int]:
        return _buckets(self._rows("dashboard_alert_buckets", {"since": since, "until": until, "bucket": bucket}))

    def recently_resolved(self, since: datetime, opened_since: datetime, limit: int) -> list[AlertView]:
        rows = self._rows("dashboard_recently_resolved",
                          {"since": since, "opened_since": opened_since, "limit": limit})
        return [_alert_view(r) for r in rows]

    def checkin_issued(self, workflow_ids: list[int]) -> dict[int, datetime]:
        """When each listed workflow's check-in URL was issued; absent: none issued."""
        if not workflow_ids:
            return {}
        rows = self._rows("dashboard_checkin_issued", {"workflow_ids": workflow_ids})
        return {int(r["workflow_id"]): r["created_at"] for r in rows}


def _buckets(rows: list[dict[str, Any]]) -> dict[datetime, int]:
    return {r["bucket"]: int(r["n"]) for r in rows}
