"""Trigger operations: the ticker claims due schedules and sleeps until the earliest fire time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from tickwarden.store.base import StoreBase


@dataclass(frozen=True)
class DueGroup:
    """Claimed, due schedules whose ticks are alike: one expression, zone, fire time, deadline and profile.

    The members' ids are PostgreSQL array text (`{3,4,5}`), index for index.
    """

    next_fire_at: datetime
    cron: str
    timezone: str
    starting_deadline_seconds: int
    cadence_seconds: int
    monitoring_enabled: bool
    timeout_seconds: int | None
    policy_overrides: str
    kind: str
    members: int
    schedule_ids: str
    workflow_ids: str
    tenant_ids: str


@dataclass(frozen=True)
class Advance:
    """Schedules (array text of ids) to move to their next fire time, with the newest tick they fired."""

    schedule_ids: str
    next_fire_at: datetime | None
    last_fired_at: datetime | None


def parse_int_array(text: str) -> list[int]:
    """Return the integers of PostgreSQL's text form of a one-dimensional integer array."""
    inner = text.strip("{}")
    return [int(v) for v in inner.split(",")] if inner else []


def int_array_literal(values: list[int] | tuple[int, ...]) -> str:
    """Return PostgreSQL's text form of an integer array."""
    return "{" + ",".join(str(int(v)) for v in values) + "}"


class TriggerRepository(StoreBase):
    def claim_due(self, now: datetime, limit: int) -> list[DueGroup]:
        """Lock up to `limit` due schedules (earliest first) for this transaction; return them grouped."""
        return self.claim_due_and_earliest(now, limit)[0]

    def claim_due_and_earliest(self, now: datetime, limit: int) -> tuple[list[DueGroup], datetime | None]:
        """`claim_due`, with the earliest fire time of the schedules the claim did not take: one statement.

        With the fire times the pass then writes for the schedules it took, that is the
        earliest fire time once the pass is done (None: no active schedule), as of the
        claim's snapshot: a schedule written after it wakes the ticker itself, as one
        written after the pass did. When nothing was claimed it is `earliest_fire`.
        """
        rows = self._tuples("trigger_claim_due", {"now": now, "limit": limit})
        # every row carries `later`; a claim that took nothing is one row without a group
        return [DueGroup(*row[1:]) for row in rows if row[1] is not None], rows[0][0]

    def earliest_fire(self) -> datetime | None:
        return self.submit_earliest_fire()()

    def submit_earliest_fire(self) -> Callable[[], datetime | None]:
        """`earliest_fire` sent now; the returned reader reads it (`StoreBase._submit`)."""
        read = self._submit("trigger_earliest_fire")

        def earliest() -> datetime | None:
            rows = read()
            return rows[0]["next_fire_at"] if rows else None

        return earliest

    def notify_wake(self, loop: str) -> None:
        self._send("trigger_notify_wake", {"loop": loop})
