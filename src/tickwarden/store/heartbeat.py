"""Loop heartbeats: one row per (replica, loop), updated after every pass."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickwarden.models import from_row
from tickwarden.store.base import StoreBase


@dataclass(frozen=True)
class Heartbeat:
    replica_id: str
    loop: str
    last_pass_at: datetime
    last_duration_ms: float
    passes: int
    last_error: str | None
    next_pass_at: datetime | None


class HeartbeatStore(StoreBase):
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
