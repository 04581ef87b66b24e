"""Self-test statements: the synthetic tenant's registration and what its check reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from tickwarden.models import Alert, AlertEvent, Attempt, Channel, Run, from_row
from tickwarden.store.base import StoreBase


@dataclass(frozen=True)
class SelftestDelivery:
    """One outbox row of the synthetic tenant, with its event's kind and severity."""

    id: int
    event_id: int
    alert_id: int
    channel_id: int
    status: str
    tries: int
    last_error: str | None
    sent_at: datetime | None
    event_kind: str
    event_severity: str


class SelftestRepository(StoreBase):
    def begin(self, tenant_id: int, *, no_send: bool, lent_channel_ids: Sequence[int], now: datetime,
                       started_by: str) -> None:
        self._execute("selftest_begin", {"tenant_id": tenant_id, "no_send": no_send,
                                         "lent_channel_ids": list(lent_channel_ids), "now": now,
                                         "started_by": started_by})

    def stale_tenants(self, before: datetime) -> list[tuple[int, str]]:
        return [(r["id"], r["name"]) for r in self._rows("selftest_stale_tenants", {"before": before})]

    def routes(self, tenant_id: int | None) -> list[Channel]:
        return [from_row(Channel, r) for r in self._rows("selftest_routes", {"tenant_id": tenant_id})]

    def create_due_run(self, tenant_id: int, workflow_id: int, scheduled_for: datetime,
                                now: datetime) -> Run | None:
        row = self._row("selftest_create_due_run", {"tenant_id": tenant_id, "workflow_id": workflow_id,
                                                    "scheduled_for": scheduled_for, "now": now})
        return from_row(Run, row) if row else None

    def runs(self, tenant_id: int) -> list[tuple[str, Run]]:
        return [(r["workflow"], from_row(Run, r)) for r in self._rows("selftest_runs", {"tenant_id": tenant_id})]

    def queued_attempts(self, tenant_id: int) -> list[Attempt]:
        return [from_row(Attempt, r) for r in self._rows("selftest_queued_attempts", {"tenant_id": tenant_id})]

    def alerts(self, tenant_id: int) -> list[tuple[str, Alert]]:
        return [(r["workflow"], from_row(Alert, r)) for r in self._rows("selftest_alerts", {"tenant_id": tenant_id})]

    def events(self, tenant_id: int) -> list[AlertEvent]:
        return [from_row(AlertEvent, r) for r in self._rows("selftest_events", {"tenant_id": tenant_id})]

    def outbox(self, tenant_id: int) -> list[SelftestDelivery]:
        return [from_row(SelftestDelivery, r) for r in self._rows("selftest_outbox", {"tenant_id": tenant_id})]

    def threads(self, tenant_id: int) -> list[tuple[int, int, str]]:
        return [(r["alert_id"], r["channel_id"], r["thread_key"])
                for r in self._rows("selftest_threads", {"tenant_id": tenant_id})]

    def wake(self, loop: str = "") -> None:
        self._rows("selftest_wake", {"loop": loop})
