"""Loop heartbeats: one row per (replica, loop), updated after every pass."""

from __future__ import annotations

from datetime import datetime

from tickwarden.models import Heartbeat, from_row
from tickwarden.store.base import StoreBase


class HeartbeatRepository(StoreBase):
    def record_heartbeat(
        self,
        replica_id: str,
        loop: str,
        at: datetime,
        duration_ms: float,
        error: str | None,
        next_pass_at: datetime | None,
    ) -> None:
        self._execute(
            "heartbeat_record",
            {"replica_id": replica_id, "loop": loop, "at": at, "duration_ms": duration_ms,
             "error": error, "next_pass_at": next_pass_at},
        )

    def list_heartbeats(self) -> list[Heartbeat]:
        return [from_row(Heartbeat, row) for row in self._rows("heartbeat_list")]
