"""Outbox operations: alert events become one delivery row per channel, then deliveries.

A delivery row moves like this (`notifier.py` drives it):

    pending ──claim──► sending ──► sent
       ▲                  │ └────► dead      (permanent error, or tries spent)
       └── failed ◄───────┘                  (transient error: back-off)
    sending ──lease ran out──► failed        (the sender crashed)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from psycopg.types.json import Jsonb

from tickwarden.models import Channel, from_row
from tickwarden.store.base import StoreBase

CHANNEL_KINDS = ("slack", "email", "webhook", "recording", "pagerduty", "teams")
AUDIENCES = ("customer", "engineering", "shadow")


@dataclass(frozen=True)
class ChannelBacklog:
    channel: Channel
    pending: int
    sending: int
    failed: int
    dead: int
    sent: int


@dataclass(frozen=True)
class DeliveryContext:
    """One claimed delivery with everything its message is made of."""

    outbox_id: int
    event_id: int
    tries: int
    event_kind: str
    event_at: datetime
    event_severity: str
    event_owner: str
    actor: str
    note: str | None
    event_data: dict[str, Any]
    alert_id: int
    alert_tenant_id: int
    alert_status: str
    alert_severity: str
    alert_owner: str
    first_severity: str
    failure_count: int
    first_failure_at: datetime
    last_failure_at: datetime
    opened_at: datetime
    escalated_at: datetime | None
    resolved_at: datetime | None
    downtime_seconds: int | None
    last_error: str | None
    last_error_category: str | None
    failed_step: str | None
    shadow: bool
    tenant: str
    tenant_display_name: str
    workflow: str
    channel: Channel
    thread_key: str | None
    parent_ref: str | None
    log_tail: str | None
    # the row's earlier try may have reached the provider (a sender died, no answer came)
    maybe_sent: bool = False
    last_run_id: int | None = None


@dataclass(frozen=True)
class ThreadOpened:
    """The conversation a delivery opened: remembered so the alert's later messages reply in it."""

    alert_id: int
    channel_id: int
    tenant_id: int
    thread_key: str
    parent_ref: str | None


# An outbox row the fan-out just wrote, with what deciding its hold needs (`holds.hold_new`): (its id,
# its alert's workflow only where a maintenance window could cover it, when earlier held rows of its
# alert and channel are released). A tuple, not a class of its own: the alert path copies its values
# into as few shapes as it can.
NewDelivery = tuple[int, int | None, datetime | None]


class Waiting(NamedTuple):
    """The notifier's look: a sender's claim ran out, a held delivery's window ended, the earliest due."""

    stale: bool
    held: bool
    due: datetime | None


@dataclass(frozen=True)
class OutboxProblem:
    id: int
    status: str
    tries: int
    next_attempt_at: datetime
    last_error: str | None
    alert_id: int
    event: str
    channel: str
    tenant: str | None


def _channel(row: dict[str, Any], prefix: str = "") -> Channel:
    if not prefix:
        return from_row(Channel, row)
    return from_row(Channel, {k[len(prefix):]: v for k, v in row.items() if k.startswith(prefix)})


class OutboxRepository(StoreBase):
    def enqueue_notifications(self, event_ids: Sequence[int], now: datetime) -> list[NewDelivery]:
        """Write the outbox rows for these events (idempotent); return the new rows, each with its hold's scope.

        Only `alerts.notify` calls this: it holds the new rows a maintenance window covers
        in the same transaction, deciding from what this returns, so a fan-out near no
        window is one round trip.
        """
        if not event_ids:
            return []
        rows = self._rows("outbox_enqueue_notifications", {"event_ids": list(event_ids), "now": now})
        if rows:
            # delivered at commit: notifiers deliver now instead of at their next poll
            self._send("outbox_wake_notifier")
        return [(r["outbox_id"], r["workflow_id"], r["held_until"]) for r in rows]

    # channels

    def upsert_notification_channel(
        self,
        *,
        tenant_id: int | None,
        name: str,
        kind: str,
        audience: str,
        now: datetime,
        config: dict[str, Any] | None = None,
        secret_ref: str | None = None,
        severities: list[str] | None = None,
        events: list[str] | None = None,
    ) -> Channel:
        """Create or update a channel; (tenant, name) is its identity; no severities or events: it hears all."""
        row = self._row(
            "outbox_upsert_notification_channel",
            {"tenant_id": tenant_id, "name": name, "kind": kind, "audience": audience,
             "config": Jsonb(config or {}), "secret_ref": secret_ref, "now": now,
             "severities": severities or None, "events": events or None},
        )
        assert row is not None
        return _channel(row)

    def list_notification_channels(self) -> list[ChannelBacklog]:
        return [
            ChannelBacklog(_channel(r), r["pending"], r["sending"], r["failed"], r["dead"], r["sent"])
            for r in self._rows("outbox_list_notification_channels")
        ]

    def find_notification_channels(self, name: str, tenant: str | None = None) -> list[Channel]:
        return [_channel(r) for r in self._rows("outbox_find_notification_channels", {"name": name, "tenant": tenant})]

    def enable_notification_channel(self, channel_id: int) -> bool:
        return self._execute("outbox_set_notification_channel_enabled", {"channel_id": channel_id}) == 1

    def disable_notification_channel(self, channel_id: int, reason: str, now: datetime) -> list[int]:
        """Disable a channel and give up on its waiting deliveries; return the rows given up."""
        self._execute("outbox_disable_notification_channel", {"channel_id": channel_id, "reason": reason, "now": now})
        rows = self._rows("outbox_bury_channel_outbox", {"channel_id": channel_id, "reason": f"channel disabled: {reason}"})
        return [r["id"] for r in rows]

    # deliveries

    def release_expired_outbox(self, now: datetime) -> Callable[[], list[int]]:
        """Send the release of expired claims now; the returned reader gives the ids released.

        On a pipelined connection the statement goes out with the next one read (the
        claim that follows it in a pass), so the release costs no round trip of its own.
        """
        read = self._submit("outbox_release_expired_outbox", {"now": now})
        return lambda: [r["id"] for r in read()]

    def claim_deliveries(
        self, replica_id: str, now: datetime, locked_until: datetime, batch: int, kinds: Sequence[str]
    ) -> Callable[[], list[DeliveryContext]]:
        """Send the claim of due rows under this replica's lease now; the returned reader gives each
        claimed row with its message's context, in event order.

        On a pipelined connection the claim goes out with the next statement read, so what
        the caller asks next in the transaction (the claimed alerts' tick facts) shares its round trip.
        """
        params = {"replica_id": replica_id, "now": now, "locked_until": locked_until, "batch": batch,
                  "kinds": list(kinds)}
        read = self._submit("outbox_claim_deliveries", params)

        def contexts() -> list[DeliveryContext]:
            found = []
            for row in read():
                values = {k: v for k, v in row.items() if not k.startswith("channel_")}
                found.append(from_row(DeliveryContext, {**values, "channel": _channel(row, "channel_")}))
            return found

        return contexts

    def claim_outbox(
        self, replica_id: str, now: datetime, locked_until: datetime, batch: int, kinds: Sequence[str]
    ) -> list[int]:
        """Claim due rows under this replica's lease (as `claim_deliveries`); return their ids."""
        return [c.outbox_id for c in self.claim_deliveries(replica_id, now, locked_until, batch, kinds)()]

    def record_sent(
        self, outbox_id: int, replica_id: str, now: datetime, thread: ThreadOpened | None = None, *,
        relaxed: bool = False,
    ) -> Callable[[], bool]:
        """Send the record of a delivery now; the returned reader says whether the claim was still ours.

        `thread`: the delivery opened the alert's conversation on its channel, remembered in
        the same statement. `relaxed`: the statement is its transaction's only one, which
        then commits without waiting for the WAL flush (see outbox_record_sent). On a
        pipelined connection the record goes out with the next statement read, so a caller
        with more to ask in the transaction pays no round trip for it.
        """
        params = {"id": outbox_id, "replica_id": replica_id, "now": now, "opens": thread is not None,
                  "relaxed": relaxed,
                  "alert_id": None, "channel_id": None, "tenant_id": None, "thread_key": None, "parent_ref": None}
        if thread is not None:
            params.update(alert_id=thread.alert_id, channel_id=thread.channel_id, tenant_id=thread.tenant_id,
                          thread_key=thread.thread_key, parent_ref=thread.parent_ref)
        read = self._submit("outbox_record_sent", params)
        return lambda: len(read()) == 1

    def mark_outbox_sent(self, outbox_id: int, replica_id: str, now: datetime) -> bool:
        """Record a delivery that opened no thread (see `record_sent`)."""
        return self.record_sent(outbox_id, replica_id, now)()

    def mark_outbox_retry(
        self, outbox_id: int, replica_id: str, *, error: str, next_attempt_at: datetime, max_tries: int,
        maybe_sent: bool = False,
    ) -> str | None:
        """Back off after a transient error; return the new status ('failed' or 'dead'), None if not ours.

        `maybe_sent`: the provider may have accepted the message although no answer came.
        """
        row = self._row(
            "outbox_mark_outbox_retry",
            {"id": outbox_id, "replica_id": replica_id, "error": error,
             "next_attempt_at": next_attempt_at, "max_tries": max_tries, "maybe_sent": maybe_sent},
        )
        return row["status"] if row else None

    def defer_outbox(self, outbox_id: int, replica_id: str, next_attempt_at: datetime) -> bool:
        params = {"id": outbox_id, "replica_id": replica_id, "next_attempt_at": next_attempt_at}
        return self._execute("outbox_defer_outbox", params) == 1

    def mark_outbox_dead(self, outbox_id: int, replica_id: str, error: str) -> bool:
        return self._execute("outbox_mark_outbox_dead", {"id": outbox_id, "replica_id": replica_id, "error": error}) == 1

    def look(self, kinds: Sequence[str], now: datetime) -> Waiting:
        """What a pass has to do at `now` (see outbox_waiting): release stale claims, release held rows, claim."""
        row = self._row("outbox_waiting", {"kinds": list(kinds), "now": now})
        assert row is not None
        return Waiting(bool(row["stale"]), bool(row["held"]), row["due"])

    def waiting(self, kinds: Sequence[str], now: datetime) -> tuple[bool, datetime | None]:
        """Return whether a sender's claim has gone stale, and when the earliest delivery is due."""
        found = self.look(kinds, now)
        return found.stale, found.due

    def status_counts(self) -> dict[str, int]:
        # held and suppressed: deliveries a maintenance window holds, and those it made unnecessary
        counts = {status: 0 for status in ("pending", "sending", "failed", "dead", "sent", "held", "suppressed")}
        for row in self._rows("outbox_status_counts"):
            counts[row["status"]] = row["n"]
        return counts

    def list_outbox_problems(self, limit: int = 50) -> list[OutboxProblem]:
        return [from_row(OutboxProblem, r) for r in self._rows("outbox_list_outbox_problems", {"limit": limit})]
