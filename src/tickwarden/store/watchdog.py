"""Platform alerts about tickwarden's own loops (`watchdog.py` drives them).

A platform alert moves `open → resolved`; its deliveries move like the outbox's
(`pending → sending → sent`, `failed` with back-off, `dead` when retrying cannot help),
one row per alert, event and platform channel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tickwarden.models import Channel
from tickwarden.store.base import StoreBase
from tickwarden.store.outbox import _channel


@dataclass(frozen=True)
class LoopBeat:
    """The newest pass of one loop on any replica."""

    loop: str
    last_pass_at: datetime
    replica_id: str
    interval_seconds: float | None
    replicas: int


@dataclass(frozen=True)
class WatchdogLook:
    """What one watchdog pass decides on: newest passes by loop, open alerts by loop, deliveries due."""

    beats: dict[str, LoopBeat]
    open_alerts: dict[str, int]
    due: bool


@dataclass(frozen=True)
class PlatformAlert:
    id: int
    loop: str
    status: str
    opened_at: datetime
    last_pass_at: datetime | None
    stall_seconds: int
    opened_by: str
    resolved_at: datetime | None
    resolved_by: str | None


@dataclass(frozen=True)
class PlatformDelivery:
    """One claimed delivery with what its message is made of."""

    delivery_id: int
    event: str
    tries: int
    alert: PlatformAlert
    channel: Channel
    thread_key: str | None
    parent_ref: str | None


def _alert(row: dict[str, Any]) -> PlatformAlert:
    return PlatformAlert(
        id=row["id"], loop=row["loop"], status=row["status"], opened_at=row["opened_at"],
        last_pass_at=row["last_pass_at"], stall_seconds=row["stall_seconds"], opened_by=row["opened_by"],
        resolved_at=row["resolved_at"], resolved_by=row["resolved_by"],
    )


class WatchdogRepository(StoreBase):
    def probe(self, loops: Sequence[str], now: datetime) -> WatchdogLook:
        """Read what a watchdog pass decides on, in one statement (see `watchdog_probe`)."""
        rows = self._rows("watchdog_probe", {"loops": list(loops), "now": now})
        beats = {row["loop"]: LoopBeat(row["loop"], row["last_pass_at"], row["replica_id"], row["interval_seconds"],
                                       int(row["replicas"])) for row in rows if row["loop"] is not None}
        first = rows[0]
        open_alerts = {str(item["loop"]): int(item["id"]) for item in first["open_alerts"]}
        return WatchdogLook(beats, open_alerts, bool(first["due"]))

    def open_alert(self, loop: str, last_pass_at: datetime | None, stall_seconds: int, replica_id: str,
                            now: datetime) -> tuple[PlatformAlert, int] | None:
        """Open the loop's alert and fan it out; None when one is open already (another replica won)."""
        row = self._row("watchdog_open_alert", {"loop": loop, "last_pass_at": last_pass_at,
                                                "stall_seconds": stall_seconds, "replica_id": replica_id, "now": now})
        return (_alert(row), int(row["deliveries"])) if row else None

    def resolve_alert(self, alert_id: int, replica_id: str, now: datetime) -> tuple[PlatformAlert, int] | None:
        """Resolve an open alert and fan the resolution out; None when it was not open any more."""
        row = self._row("watchdog_resolve_alert", {"alert_id": alert_id, "replica_id": replica_id, "now": now})
        return (_alert(row), int(row["deliveries"])) if row else None

    def claim_deliveries(self, replica_id: str, now: datetime, locked_until: datetime, limit: int
                                  ) -> list[int]:
        rows = self._rows("watchdog_claim_deliveries", {"replica_id": replica_id, "now": now,
                                                        "locked_until": locked_until, "limit": limit})
        return sorted(int(row["id"]) for row in rows)

    def delivery_context(self, ids: Sequence[int]) -> list[PlatformDelivery]:
        found = []
        for row in self._rows("watchdog_delivery_context", {"ids": list(ids)}):
            alert = PlatformAlert(
                id=row["alert_id"], loop=row["loop"], status=row["alert_status"], opened_at=row["opened_at"],
                last_pass_at=row["last_pass_at"], stall_seconds=row["stall_seconds"], opened_by=row["opened_by"],
                resolved_at=row["resolved_at"], resolved_by=row["resolved_by"],
            )
            found.append(PlatformDelivery(row["delivery_id"], row["event"], row["tries"], alert,
                                          _channel(row, "channel_"), row["thread_key"], row["parent_ref"]))
        return found

    def mark_sent(self, delivery_id: int, replica_id: str, now: datetime, thread_key: str,
                           parent_ref: str | None) -> bool:
        return self._execute("watchdog_mark_sent", {"id": delivery_id, "replica_id": replica_id, "now": now,
                                                    "thread_key": thread_key, "parent_ref": parent_ref}) == 1

    def mark_failed(self, delivery_id: int, replica_id: str, *, error: str, permanent: bool,
                             next_attempt_at: datetime, max_tries: int) -> str | None:
        row = self._row("watchdog_mark_failed", {"id": delivery_id, "replica_id": replica_id, "error": error,
                                                 "permanent": permanent, "next_attempt_at": next_attempt_at,
                                                 "max_tries": max_tries})
        return str(row["status"]) if row else None
