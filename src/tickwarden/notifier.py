"""The notifier: deliver the outbox, one thread per alert and channel, exactly once.

One pass (`run_once(now)`):

1. Look (one read-only statement): is a sender's lease run out, has a maintenance
   window ended on held rows, when is the earliest delivery due? Nothing to do: done.
2. Release rows whose sender's lease ran out (a crashed replica): they become due;
   and the held rows whose window ended. Each only when the look found some.
3. Claim due rows under a lease (`FOR UPDATE SKIP LOCKED`), only rows whose earlier
   events on the same thread are all delivered (or given up), so the message that
   opens a thread always goes first and replies follow in event order. The claim
   returns each row's message context in the same statement.
4. For each claimed row, render the message and send it through the transport of
   the channel's kind: with no thread yet it opens one (its key is stored in
   notification_threads, by the statement that records the delivery), otherwise it
   replies in the thread.
5. Record the outcome with compare-and-set on the claim, before anything else is
   sent: sent; or failed with exponential back-off (jitter derived from the row id,
   so the simulator stays deterministic) until `max_tries`, then dead; or, on a
   permanent error, the channel is disabled with the reason and its waiting rows are
   given up.
6. Claim again while there is due work (a thread's next event becomes claimable
   as soon as the previous one is sent), up to `rounds` claims per pass. The last
   message a round sent is recorded in the next round's transaction, together with
   that round's look at what is due: the record still commits before the next send,
   the look sees it, and a claim is sent only when the look finds something due.

Exactly once per (event, channel): the outbox row is unique per event and channel,
a row is claimed by one replica at a time, and only the claimant may mark it sent.
The one window left is a sender that dies after the provider accepted a message and
before it recorded that: the row is sent again once the lease expires (webhooks
carry an idempotency key and email a stable Message-ID for that case). Such a row
is marked `maybe_sent` (so is one whose provider gave no answer); Slack then looks
the message up by its metadata before posting, and records the one it finds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tickwarden import ack_links, holds, metrics, secrets
from tickwarden.db import Database
from tickwarden.messages import AlertMessage, render, tick_facts
from tickwarden.reserved import is_selftest_tenant
from tickwarden.sanitize import sanitize_error
from tickwarden.store import Store
from tickwarden.store.outbox import Channel, DeliveryContext, ThreadOpened
from tickwarden.transports import default_transports
from tickwarden.transports.base import Delivery, OutgoingMessage, Thread, Transport, TransportError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PassReport:
    sent: int = 0
    retried: int = 0
    dead: int = 0
    disabled_channels: int = 0


def backoff_seconds(tries: int, row_id: int, *, base: float, cap: float) -> float:
    """Return the delay before try number `tries + 1`: exponential, capped, with up to 25% jitter.

    The jitter spreads retries of many rows that failed together; it is derived from
    the row id and the try (a multiplicative hash), never from a random source, so a
    simulated timeline is reproducible.
    """
    delay = min(cap, base * (2 ** min(tries, 30)))
    spread = ((row_id * 2654435761 + tries * 40503) % 1024) / 1024
    return min(cap, delay * (1 + 0.25 * spread))


def delivery_key(ctx: DeliveryContext) -> str:
    """The identity of one delivery (an outbox row), stable across its retries."""
    return f"alert-{ctx.alert_id}.event-{ctx.event_id}.channel-{ctx.channel.id}"


def alert_message(ctx: DeliveryContext, dashboard_url: str = "", facts_row: dict[str, Any] | None = None
                  ) -> AlertMessage:
    """Build the message facts of one claimed delivery.

    `facts_row` is the alert's row of `store.alert_tick_facts` (its tick, last attempt,
    failing step and log, how it recovered); the failing step's log from there is
    preferred to the attempt's tail, which is only the fallback.
    """
    data = ctx.event_data or {}
    facts = tick_facts(facts_row)
    failure_count = data.get("failure_count", ctx.failure_count)
    return AlertMessage(
        alert_id=ctx.alert_id,
        tenant=ctx.tenant,
        workflow=ctx.workflow,
        event=ctx.event_kind,
        event_at=ctx.event_at,
        severity=ctx.event_severity,
        owner=ctx.event_owner,
        status=ctx.alert_status,
        current_severity=ctx.alert_severity,
        current_owner=ctx.alert_owner,
        failure_count=int(failure_count) if isinstance(failure_count, int) else ctx.failure_count,
        first_failure_at=ctx.first_failure_at,
        last_failure_at=ctx.last_failure_at,
        opened_at=ctx.opened_at,
        resolved_at=ctx.resolved_at,
        downtime_seconds=ctx.downtime_seconds,
        actor=ctx.actor,
        note=ctx.note,
        error=ctx.last_error,
        error_category=ctx.last_error_category,
        failed_step=ctx.failed_step or facts.failed_step,
        log_tail=facts.log_tail or ctx.log_tail,
        shadow=ctx.shadow,
        dashboard_url=dashboard_url,
        test=is_selftest_tenant(ctx.tenant),
        facts=facts,
    )


class Notifier:
    """Deliver the notification outbox; safe with any number of replicas."""

    name = "notifier"

    def __init__(
        self,
        db: Database,
        replica_id: str,
        transports: Mapping[str, Transport] | None = None,
        *,
        batch: int = 50,
        max_tries: int = 8,
        base_backoff: float = 30.0,
        max_backoff: float = 3600.0,
        lease_seconds: float = 600.0,
        poll_seconds: float = 30.0,
        rounds: int = 20,
        dashboard_url: str = "",
        link_secret: str | None = None,
    ):
        self.db = db
        self.replica_id = replica_id
        self.transports = dict(transports) if transports is not None else default_transports()
        self.batch = batch
        self.max_tries = max_tries
        self.base_backoff = base_backoff
        self.max_backoff = max_backoff
        # A lease must outlast a whole batch of sends (each bounded by its transport's timeout).
        self.lease = timedelta(seconds=lease_seconds)
        self.poll = timedelta(seconds=poll_seconds)
        self.rounds = rounds
        self.dashboard_url = dashboard_url
        # signs the messages' acknowledge links; None: the platform secret, read when first needed
        self.link_secret = link_secret
        self.last_pass = PassReport()

    def run_once(self, now: datetime) -> datetime:
        """Do one delivery pass at `now`; return when the next one is due."""
        counts = {"sent": 0, "retried": 0, "dead": 0, "disabled_channels": 0}
        kinds = list(self.transports)
        wake = now + self.poll
        with self.db.probe() as store:
            look = store.outbox.look(kinds, now)
        due = look.due
        if not look.stale and (due is None or due > now):  # the usual pass: one read-only statement
            self.last_pass = PassReport(**counts)
            return min(wake, due) if due is not None else wake
        idle = False
        unrecorded: tuple[DeliveryContext, Delivery] | None = None  # sent by the last round, not yet recorded
        unread: list[tuple[DeliveryContext, Callable[[], str | None]]] = []  # recorded, outcome not yet read

        def settle() -> None:
            """Count the records whose outcome arrived with the read just made (see `_deliver`)."""
            for ctx, outcome in unread:
                self._count(ctx, outcome(), counts, now)
            unread.clear()
        for round_ in range(self.rounds):
            contexts: list[DeliveryContext] = []
            facts: dict[int, dict[str, Any]] = {}
            with self.db.transaction() as store:
                # durable, unlike a record alone: the claim or look that follows must reach disk first
                recorded = self._record(store, *unrecorded, now) if unrecorded is not None else None
                if round_ == 0:
                    # The look said what there is: no release is sent when it found nothing to release.
                    release = store.outbox.release_expired_outbox(now) if look.stale else None
                    if look.held:
                        # deliveries held by a maintenance window that has ended: one per alert and channel
                        holds.release_due(store, now)
                    released = release() if release is not None else []
                    if released:
                        log.warning("released %d notification(s) whose sender stopped before confirming",
                                    len(released))
                    claim = True
                else:
                    # A later round claims only when something is due: its look goes out with the record.
                    due = store.outbox.waiting(kinds, now)[1]
                    claim = due is not None and due <= now
                if claim:
                    # the claim and its alerts' tick facts go out together: the lease names the claimed rows
                    lease_end = now + self.lease
                    claimed = store.outbox.claim_deliveries(self.replica_id, now, lease_end, self.batch, kinds)
                    read_facts = store.alert_content.claimed_tick_facts(self.replica_id, lease_end)
                    contexts, facts = claimed(), read_facts()
                    if not contexts and round_ == 0:  # another replica took them, or only held rows were due
                        due = store.outbox.waiting(kinds, now)[1]
                idle = not contexts
                sent = recorded() if recorded is not None else None
            settle()  # every later round reads (its look): the records of the round before it are in
            if unrecorded is not None:
                self._count(unrecorded[0], sent, counts, now)
                unrecorded = None
            if idle:
                break
            # A channel that failed earlier in this batch is not tried again until its back-off ends.
            failed_channels: dict[int, datetime] = {}
            for ctx in contexts:
                last = ctx is contexts[-1] and round_ + 1 < self.rounds
                try:
                    outcome = self._deliver(ctx, now, failed_channels, facts.get(ctx.alert_id), record=not last)
                except Exception:  # a fault on one row must not stop the pass; its lease will expire
                    log.exception("notification %d could not be processed", ctx.outbox_id,
                                  extra={"alert_id": ctx.alert_id, "outbox_id": ctx.outbox_id})
                    continue
                if isinstance(outcome, Delivery):
                    unrecorded = (ctx, outcome)
                elif callable(outcome):
                    unread.append((ctx, outcome))
                else:
                    self._count(ctx, outcome, counts, now)
        if not idle:
            with self.db.transaction() as store:
                due = store.outbox.waiting(kinds, now)[1]
            settle()
        self.last_pass = PassReport(**counts)
        if due is not None and due < wake:
            wake = max(now, due)
        return wake

    @staticmethod
    def _count(ctx: DeliveryContext, outcome: str | None, counts: dict[str, int], now: datetime) -> None:
        metrics.current().notification_outcome(ctx, outcome, now)
        if outcome:
            counts[outcome] += 1

    def _deliver(self, ctx: DeliveryContext, now: datetime, failed_channels: dict[int, datetime],
                 facts_row: dict[str, Any] | None = None, *,
                 record: bool = True) -> str | Delivery | Callable[[], str | None] | None:
        """Send one claimed row and record what happened; a send not yet recorded (`record`
        False) returns its delivery for the caller's next transaction to record, and a record
        not yet read (`Database.late_reads`) the reader of its outcome, for after the next read."""
        channel = ctx.channel
        if not channel.enabled:
            with self.db.transaction() as store:
                store.outbox.mark_outbox_dead(ctx.outbox_id, self.replica_id,
                                       f"channel disabled: {channel.disabled_reason or 'by an operator'}")
            return "dead"
        if channel.id in failed_channels:
            with self.db.transaction() as store:
                store.outbox.defer_outbox(ctx.outbox_id, self.replica_id, failed_channels[channel.id])
            return None
        transport = self.transports[channel.kind]
        try:
            message = OutgoingMessage(
                channel=channel,
                rendered=render(alert_message(ctx, self.dashboard_url, facts_row)),
                key=delivery_key(ctx),
                alert_id=ctx.alert_id,
                thread=Thread(ctx.thread_key, ctx.parent_ref) if ctx.thread_key else None,
                sent_at=now,
                secret_value=secrets.channel_secret(self.db, channel),
                maybe_sent=ctx.maybe_sent,
                event_at=ctx.event_at,
                links=self._links(ctx),
            )
            delivery = transport.send(message)
        except secrets.SecretError as exc:  # a configuration error: retrying will not fix it
            return self._disable(ctx, channel, exc.message, now)
        except TransportError as exc:
            if exc.permanent:
                return self._disable(ctx, channel, exc.message, now)
            return self._retry(ctx, exc.message, exc.retry_after, now, failed_channels,
                               maybe_sent=exc.maybe_delivered)
        except Exception as exc:  # a transport bug is treated like a transient fault: retried, then dead
            log.exception("transport %s failed unexpectedly on notification %d", channel.kind, ctx.outbox_id)
            # it may have failed after the provider took the message: the next try looks first
            return self._retry(ctx, f"unexpected {type(exc).__name__}: {exc}", None, now, failed_channels,
                               maybe_sent=True)
        if not record:
            return delivery
        # One statement, its own transaction, relaxed: a lost record means a looked-up resend.
        with self.db.autocommit() as store:
            outcome = self._record(store, ctx, delivery, now, relaxed=True)
            if not self.db.late_reads:
                return outcome()
        # On a kept pipeline (the simulator's) the record and its commit go out with the pass's
        # next read, in the same order and transactions, and the caller reads the outcome after
        # it (`run_once`): no round trip of its own. An error in it is raised by that read: the
        # pass fails, or (the read of a later message's retry) that message's handler logs it;
        # the record is then not written, its outcome reads as a lease lost, and the row's
        # lease runs out, as after a record that failed at once.
        return outcome

    def _links(self, ctx: DeliveryContext) -> dict[str, str]:
        """The buttons' targets: the alert and run pages and a signed acknowledge link.

        Only with an absolute `dashboard_url` (`serve --public-url`): a chat button needs
        a full address. No acknowledge link once the alert is resolved or acknowledged
        by this very event.
        """
        base = self.dashboard_url.rstrip("/")
        if not base.startswith(("https://", "http://")):
            return {}
        links = {"alert": f"{base}/dashboard/alerts/{ctx.alert_id}"}
        if ctx.last_run_id is not None:
            links["run"] = f"{base}/dashboard/runs/{ctx.last_run_id}"
        if ctx.alert_status == "open" and ctx.event_kind not in ("acknowledged", "resolved"):
            if self.link_secret is None:
                try:
                    self.link_secret = ack_links.platform_secrets()[0]
                except Exception:  # no usable key: the message goes out without the button
                    log.exception("no platform secret to sign acknowledge links with")
                    self.link_secret = ""
            if self.link_secret:
                links["acknowledge"] = ack_links.link_for(base, ctx.alert_id, ctx.event_at, delivery_key(ctx),
                                                          self.link_secret)
        return links

    def _record(self, store: Store, ctx: DeliveryContext, delivery: Delivery, now: datetime, *,
                relaxed: bool = False) -> Callable[[], str | None]:
        """Send the record of a sent row in the caller's transaction: the compare-and-set, with
        the thread if the row opened one; the returned reader gives its outcome.

        The caller reads it before its transaction ends; until then the record rides with
        whatever the transaction reads next (on a pipelined connection, no round trip of its own).
        """
        thread = None
        if ctx.thread_key is None:
            thread = ThreadOpened(alert_id=ctx.alert_id, channel_id=ctx.channel.id, tenant_id=ctx.alert_tenant_id,
                                  thread_key=delivery.thread_key, parent_ref=delivery.parent_ref)
        marked = store.outbox.record_sent(ctx.outbox_id, self.replica_id, now, thread, relaxed=relaxed)

        def outcome() -> str | None:
            if not marked():
                # Our lease ran out and another replica took the row over; it will send again.
                log.warning("notification %d was delivered after its lease expired", ctx.outbox_id)
                return None
            return "sent"

        return outcome

    def _retry(self, ctx: DeliveryContext, error: str, retry_after: float | None, now: datetime,
               failed_channels: dict[int, datetime], *, maybe_sent: bool = False) -> str | None:
        delay = backoff_seconds(ctx.tries, ctx.outbox_id, base=self.base_backoff, cap=self.max_backoff)
        if retry_after is not None:
            delay = max(delay, retry_after)
        next_at = now + timedelta(seconds=delay)
        failed_channels[ctx.channel.id] = next_at
        with self.db.transaction() as store:
            status = store.outbox.mark_outbox_retry(ctx.outbox_id, self.replica_id, error=sanitize_error(error),
                                             next_attempt_at=next_at, max_tries=self.max_tries,
                                             maybe_sent=maybe_sent)
        if status == "dead":
            log.warning("gave up on notification %d to %s after %d tries: %s",
                        ctx.outbox_id, ctx.channel.label, ctx.tries + 1, sanitize_error(error),
                        extra={"alert_id": ctx.alert_id, "outbox_id": ctx.outbox_id, "channel_id": ctx.channel.id})
            return "dead"
        return "retried" if status else None

    def _disable(self, ctx: DeliveryContext, channel: Channel, error: str, now: datetime) -> str:
        reason = sanitize_error(error)
        with self.db.transaction() as store:
            store.outbox.mark_outbox_dead(ctx.outbox_id, self.replica_id, reason)
            store.outbox.disable_notification_channel(channel.id, reason, now)
        log.error("disabled notification channel %s: %s", channel.label, reason,
                  extra={"alert_id": ctx.alert_id, "channel_id": channel.id})
        return "disabled_channels"


def send_test_message(channel: Channel, transport: Transport, now: datetime, *, dashboard_url: str = "") -> Delivery:
    """Send a one-off test message through a channel's real transport (outside the outbox)."""
    tenant = channel.tenant or "platform"
    message = AlertMessage(
        alert_id=0, tenant=tenant, workflow=f"channel-test-{channel.name}", event="test", event_at=now,
        severity="warning", owner="engineering", status="open", current_severity="warning",
        current_owner="engineering", failure_count=0, first_failure_at=None, last_failure_at=None,
        opened_at=None, actor="tickwarden", dashboard_url=dashboard_url,
    )
    return transport.send(OutgoingMessage(
        channel=channel, rendered=render(message), key=f"test.channel-{channel.id}.{int(now.timestamp())}",
        alert_id=None, thread=None, sent_at=now,
    ))
