"""The watcher watched: tell the platform team, through its own channels, that a loop stalled.

Every control-plane replica runs this loop beside the others. One pass (`run_once(now)`):

1. Read the newest pass of each watched loop across every replica (`loop_heartbeats`).
   A loop is stalled when no replica has passed it for its span:
   `max(STALL_FACTOR × interval, MIN_STALL)`, the interval being the sleep its newest
   pass announced (`next_pass_at − last_pass_at`, `DEFAULT_INTERVAL` when it announced
   none). A watched loop with no heartbeat at all counts from this watchdog's first pass.
2. In one transaction: open a platform alert for each stalled loop that has none
   (INSERT … ON CONFLICT on the one-open index, so replicas that notice together open
   it once; only the inserting replica writes its deliveries, one per platform channel
   that takes critical `opened` events) and resolve each open alert whose loop passes
   again (compare-and-set on its status; the winner writes the resolutions, one per
   channel that received the opening).
3. Deliver: claim due deliveries under a lease with `FOR UPDATE SKIP LOCKED`, send
   each through the channel kind's transport with the message of `messages.
   render_platform`, record sent (compare-and-set on the claim) or back off. A
   resolution waits for its channel's opening and replies in its thread. So two
   replicas never open two alerts and never send one delivery twice; the one window
   left, as for the notifier, is a sender that dies between the provider's acceptance
   and the database's record (its row is sent again after the lease).
4. When no watched loop is stalled and the pass reached the database, ping the
   external heartbeat URL (`TICKWARDEN_HEARTBEAT_URL`), at most once per
   `ping_seconds`: a monitor outside tickwarden then notices a total outage (every
   replica down, or the database gone), which no replica can report by itself.

The watchdog does not watch itself: if it stalls on every replica, the external
heartbeat stops. Loops are watched by name (the loops this replica runs): heartbeats
of loops no replica is configured to run any more are ignored, not alerted on forever.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx

from tickwarden.db import Database
from tickwarden.errors import UsageError
from tickwarden.messages import PlatformAlertMessage, render_platform
from tickwarden.notifier import backoff_seconds
from tickwarden.outbound import OutboundRefused, check_url, guarded_client
from tickwarden.sanitize import sanitize_error
from tickwarden.store.watchdog import LoopBeat, PlatformDelivery, WatchdogLook
from tickwarden.transports import default_transports
from tickwarden.transports.base import Delivery, OutgoingMessage, Thread, Transport, TransportError

log = logging.getLogger(__name__)

HEARTBEAT_URL_ENV = "TICKWARDEN_HEARTBEAT_URL"
STALL_FACTOR = 3
MIN_STALL = timedelta(minutes=2)
DEFAULT_INTERVAL = timedelta(minutes=1)


def stall_span(interval_seconds: float | None) -> timedelta:
    """How long a loop may go without a pass on any replica: `max(3 × interval, 2 min)`."""
    interval = timedelta(seconds=interval_seconds) if interval_seconds and interval_seconds > 0 else DEFAULT_INTERVAL
    return max(STALL_FACTOR * interval, MIN_STALL)


@dataclass(frozen=True)
class Stall:
    loop: str
    last_pass_at: datetime | None
    span: timedelta


def stalled_loops(watched: Sequence[str], beats: Mapping[str, LoopBeat], now: datetime,
                  watching_since: datetime) -> list[Stall]:
    """Return the watched loops no replica has passed within their span, in name order."""
    stalls = []
    for loop in sorted(set(watched)):
        beat = beats.get(loop)
        span = stall_span(beat.interval_seconds if beat else None)
        last = beat.last_pass_at if beat else None
        if now - (last or watching_since) > span:
            stalls.append(Stall(loop, last, span))
    return stalls


def heartbeat_url(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the external heartbeat URL, or None; a malformed one is a usage error (one sentence).

    Only its form is checked here (the destination is checked at every ping, by the
    outbound policy: addresses resolve differently over time).
    """
    url = ((os.environ if environ is None else environ).get(HEARTBEAT_URL_ENV) or "").strip()
    if not url:
        return None
    try:
        split = urlsplit(url)
        split.port  # noqa: B018 — raises on a malformed port
    except ValueError:
        raise UsageError(f"{HEARTBEAT_URL_ENV} is not a valid URL.") from None
    if split.scheme not in ("http", "https") or not split.hostname:
        raise UsageError(f"{HEARTBEAT_URL_ENV} must be an http:// or https:// URL with a host.")
    if split.username or split.password:
        raise UsageError(f"{HEARTBEAT_URL_ENV} must not carry credentials in the URL.")
    return url


@dataclass
class WatchdogReport:
    stalled: list[str] = field(default_factory=list)
    opened: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    sent: int = 0
    failed: int = 0
    pinged: bool = False


class Watchdog:
    """Open and resolve platform alerts about stalled loops; ping the external heartbeat."""

    name = "watchdog"

    def __init__(
        self,
        db: Database,
        replica_id: str,
        watched: Sequence[str],
        transports: Mapping[str, Transport] | None = None,
        *,
        dashboard_url: str = "",
        poll_seconds: float = 30.0,
        lease_seconds: float = 300.0,
        max_tries: int = 8,
        base_backoff: float = 30.0,
        max_backoff: float = 1800.0,
        batch: int = 20,
        ping_url: str | None = None,
        ping_seconds: float = 60.0,
        ping_timeout: float = 10.0,
        environ: Mapping[str, str] | None = None,
    ):
        self.db = db
        self.replica_id = replica_id
        self.watched = [name for name in watched if name != self.name]
        self.transports = dict(transports) if transports is not None else default_transports()
        self.dashboard_url = dashboard_url
        self.poll = timedelta(seconds=poll_seconds)
        self.lease = timedelta(seconds=lease_seconds)
        self.max_tries = max_tries
        self.base_backoff = base_backoff
        self.max_backoff = max_backoff
        self.batch = batch
        self.ping_url = ping_url
        self.ping_every = timedelta(seconds=ping_seconds)
        self.ping_timeout = ping_timeout
        self.environ = environ
        self.watching_since: datetime | None = None
        self.last_ping_at: datetime | None = None
        self.last = WatchdogReport()

    def run_once(self, now: datetime) -> datetime:
        """Do one pass at `now`; return when the next one is due.

        An idle pass (nothing stalled that is not already open, nothing to resolve, no
        delivery due) is one read-only statement and no transaction. Otherwise the same
        look is taken again inside a transaction and acted on there; the one-open index
        and the compare-and-set on resolution make a racing replica's action a no-op.
        """
        if self.watching_since is None:
            self.watching_since = now
        report = WatchdogReport()
        with self.db.probe() as store:
            look = store.watchdog.probe(self.watched, now)
        stalls, to_open, to_resolve = self._decide(look, now)
        if to_open or to_resolve:
            with self.db.transaction() as store:
                look = store.watchdog.probe(self.watched, now)
                stalls, to_open, to_resolve = self._decide(look, now)
                for loop, alert_id in to_resolve:
                    if store.watchdog.resolve_alert(alert_id, self.replica_id, now) is not None:
                        report.resolved.append(alert_id)
                        log.warning("platform alert %d resolved: loop %s runs again", alert_id, loop)
                for stall in to_open:
                    opened = store.watchdog.open_alert(stall.loop, stall.last_pass_at,
                                                       int(stall.span.total_seconds()), self.replica_id, now)
                    if opened is not None:
                        report.opened.append(opened[0].id)
                        log.error("platform alert %d opened: loop %s has not run on any replica since %s",
                                  opened[0].id, stall.loop, stall.last_pass_at)
        report.stalled = [s.loop for s in stalls]
        if look.due or report.opened or report.resolved:
            self._deliver(now, report)
        if not report.stalled:
            report.pinged = self._ping(now)
        self.last = report
        wake = now + self.poll
        if self.ping_url and self.last_ping_at is not None:
            wake = min(wake, self.last_ping_at + self.ping_every)
        return max(wake, now)

    def _decide(self, look: WatchdogLook, now: datetime) -> tuple[list[Stall], list[Stall], list[tuple[str, int]]]:
        """Return the stalled watched loops, those to open an alert for, and the open alerts to resolve.

        An open alert resolves once its loop is no longer stalled, that is once it has
        passed again on some replica. An alert of a loop this replica does not watch
        (another configuration) resolves the same way and stays open without passes.
        """
        assert self.watching_since is not None
        loops = sorted(set(self.watched) | set(look.open_alerts))
        stalled = {s.loop: s for s in stalled_loops(loops, look.beats, now, self.watching_since)}
        watched = set(self.watched)
        stalls = [s for loop, s in stalled.items() if loop in watched]
        to_open = [s for s in stalls if s.loop not in look.open_alerts]
        to_resolve = [(loop, alert_id) for loop, alert_id in sorted(look.open_alerts.items()) if loop not in stalled]
        return stalls, to_open, to_resolve

    def _deliver(self, now: datetime, report: WatchdogReport) -> None:
        for _ in range(5):  # a resolution becomes claimable once its opening is sent
            with self.db.transaction() as store:
                ids = store.watchdog.claim_deliveries(self.replica_id, now, now + self.lease, self.batch)
                claimed = store.watchdog.delivery_context(ids) if ids else []
            if not claimed:
                return
            for delivery in claimed:
                try:
                    self._send(delivery, now, report)
                except Exception:  # one row's fault must not stop the pass; its lease will expire
                    log.exception("platform alert delivery %d could not be processed", delivery.delivery_id)

    def _send(self, delivery: PlatformDelivery, now: datetime, report: WatchdogReport) -> None:
        channel = delivery.channel
        alert = delivery.alert
        message = PlatformAlertMessage(
            alert_id=alert.id, loop=alert.loop, event=delivery.event, event_at=now, opened_at=alert.opened_at,
            last_pass_at=alert.last_pass_at, stall_seconds=alert.stall_seconds,
            replica=alert.resolved_by if delivery.event == "resolved" and alert.resolved_by else alert.opened_by,
            resolved_at=alert.resolved_at, dashboard_url=self.dashboard_url,
        )
        transport = self.transports.get(channel.kind)
        error: str | None = None
        permanent = False
        sent: Delivery | None = None
        if not channel.enabled:
            error, permanent = f"channel disabled: {channel.disabled_reason or 'by an operator'}", True
        elif transport is None:
            error, permanent = f"no transport for channel kind {channel.kind}", True
        else:
            try:
                sent = transport.send(OutgoingMessage(
                    channel=channel, rendered=render_platform(message),
                    key=f"platform-alert-{alert.id}.{delivery.event}.channel-{channel.id}", alert_id=None,
                    thread=Thread(delivery.thread_key, delivery.parent_ref) if delivery.thread_key else None,
                    sent_at=now,
                ))
            except TransportError as exc:
                error, permanent = exc.message, exc.permanent
            except Exception as exc:  # a transport bug is retried like a transient fault
                error = f"unexpected {type(exc).__name__}"
        with self.db.transaction() as store:
            if sent is not None:
                if store.watchdog.mark_sent(delivery.delivery_id, self.replica_id, now, sent.thread_key,
                                            sent.parent_ref):
                    report.sent += 1
                return
            delay = backoff_seconds(delivery.tries, delivery.delivery_id, base=self.base_backoff, cap=self.max_backoff)
            status = store.watchdog.mark_failed(delivery.delivery_id, self.replica_id, error=sanitize_error(error),
                                                permanent=permanent, next_attempt_at=now + timedelta(seconds=delay),
                                                max_tries=self.max_tries)
        report.failed += 1
        log.warning("platform alert %d to %s not delivered (%s): %s", alert.id, channel.label, status,
                    sanitize_error(error))

    def _ping(self, now: datetime) -> bool:
        """GET the external heartbeat URL if one is set and a ping is due; never raises."""
        if not self.ping_url or (self.last_ping_at is not None and now < self.last_ping_at + self.ping_every):
            return False
        self.last_ping_at = now  # a failed ping is not retried before the next interval either
        try:
            check_url(self.ping_url, self.environ)
            with guarded_client(self.ping_timeout, self.environ) as client:  # checked again at connect time
                response = client.get(self.ping_url)
            if response.status_code >= 400:
                log.warning("the external heartbeat answered HTTP %d", response.status_code)
                return False
            return True
        except OutboundRefused as exc:
            log.warning("the external heartbeat URL is refused: %s", sanitize_error(exc.message))
        except httpx.HTTPError as exc:
            # The URL may carry the monitor's key: only the kind of failure is logged.
            log.warning("the external heartbeat could not be reached: %s", type(exc).__name__)
        return False
