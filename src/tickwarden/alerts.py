"""The alert state machine: one state per broken workflow, not one message per failure.

::

                    evaluator: failures ≥ alert_after
                                   │
                                   ▼  event `opened` (notifies)
     ┌───────────────────── open(first_severity) ◄──┐ later confirmed failure:
     │                        │    │    │           │ count, error, owner updated
     │                        │    │    └───────────┘ event `failed` (history only)
     │  escalation clock:     │    │
     │  escalate_at ≤ now, or │    ├── reassign    (event `reassigned`, pins the owner)
     │  failures ≥            │    ├── acknowledge (event `acknowledged`: escalation stops, stays open)
     │  escalate_after        │    ├── snooze      (event `snoozed`: no escalation until a time)
     │  (not acknowledged,    │    ├── note        (event `noted`; an internal one reaches the platform only)
     │  not snoozed; manual   │    └── pause of the workflow (event `paused`)
     │  runs' failures do not ▼
     │  count)    open(critical)  event `escalated` (notifies); only from warning
     │                        │
     └────────────┬───────────┘
                  ▼  next success, scheduled or manual; or resolve by hand with a note
              resolved        event `resolved` (notifies): resolved_at,
                              resolved_by_run_id (none by hand), downtime = resolved_at − first_failure_at

At open the alert captures what later decisions need, so that editing the
schedule mid-incident changes nothing: first_severity from the profile, owner from
`categories.owner_for(category of the failure)`, cadence, escalation multiplier,
escalate_after and escalate_at = opened_at + multiplier × cadence, and shadow =
tenant.shadow or workflow.shadow (a shadow alert is delivered to shadow channels
only). The owner follows the newest failure's category until someone reassigns the
alert by hand; from then on it stays where they put it.

Every transition is one statement that changes the alert with a compare-and-set
and writes its event row (`store/monitoring.sql`), and its events go to
`store.enqueue_notifications` in the same transaction: a notification is never
lost (the outbox row commits with the state) and never doubled (a replica whose
compare-and-set matched nothing wrote no event; UNIQUE (event, channel) besides).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwarden.db import Database
from tickwarden.errors import Conflict, InvalidInput, NotFound
from tickwarden.models import Alert, AlertEvent
from tickwarden.sanitize import sanitize_error
from tickwarden.store import Store
from tickwarden.store.monitoring import FailureUpdate, OpenAlert

OWNERS = ("engineering", "customer")
MAX_NOTE = 1000
MAX_SNOOZE_SECONDS = 30 * 86400


@dataclass(frozen=True)
class Decision:
    """What to do with one workflow's alert state: decided by `evaluator.decide`, applied here."""

    workflow_id: int
    verdict: str  # none | not_yet | alert | resolve
    failures: int = 0
    severity: str | None = None
    open: OpenAlert | None = None
    update: FailureUpdate | None = None
    escalate_alert_id: int | None = None
    resolve: tuple[int, int | None] | None = None


@dataclass
class EvaluationReport:
    """What one evaluation did, for logs, tests and the benchmark."""

    evaluated: int = 0
    opened: list[int] = field(default_factory=list)
    updated: list[int] = field(default_factory=list)
    escalated: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    event_ids: list[int] = field(default_factory=list)
    failed_workflows: list[int] = field(default_factory=list)

    def merge(self, other: EvaluationReport) -> None:
        self.evaluated += other.evaluated
        self.opened += other.opened
        self.updated += other.updated
        self.escalated += other.escalated
        self.resolved += other.resolved
        self.event_ids += other.event_ids
        self.failed_workflows += other.failed_workflows


def apply_decisions(store: Store, decisions: Sequence[Decision], now: datetime, report: EvaluationReport) -> None:
    """Apply a batch of evaluator decisions set-based, in the caller's transaction.

    1. Open the new alerts (ON CONFLICT on the one-open index: a racing opener wins once).
    2. Record later failures on open alerts (compare-and-set on the count).
    3. Escalate open warnings whose failures reached escalate_after, including
       alerts opened in step 1 with enough failures already.
    4. Resolve alerts whose workflow succeeded.
    5. Fan every new event out to the outbox.
    """
    opened = store.open_alerts([d.open for d in decisions if d.open], now)
    updated = store.record_alert_failures([d.update for d in decisions if d.update], now)
    to_escalate = [d.escalate_alert_id for d in decisions if d.escalate_alert_id is not None]
    to_escalate += [
        t.alert_id
        for t in opened
        if t.severity == "warning" and t.failure_count is not None and t.escalate_after is not None
        and t.failure_count >= t.escalate_after
    ]
    escalated = store.escalate_alerts(to_escalate, "failures", now)
    resolved = store.resolve_alerts([d.resolve for d in decisions if d.resolve], now)
    event_ids = [t.event_id for t in (*opened, *updated, *escalated, *resolved)]
    notify(store, event_ids, now)
    report.opened += [t.alert_id for t in opened]
    report.updated += [t.alert_id for t in updated]
    report.escalated += [t.alert_id for t in escalated]
    report.resolved += [t.alert_id for t in resolved]
    report.event_ids += event_ids


def notify(store: Store, event_ids: Sequence[int], now: datetime) -> int:
    """Write the outbox rows of these events and hold those a maintenance window covers; return how many.

    Every alert event reaches the outbox through here, so this is the one place a
    maintenance window stops a delivery (`holds.hold_new`), in the event's transaction.
    """
    from tickwarden import holds

    new = store.enqueue_notifications(event_ids, now)
    holds.hold_new(store, new, now)
    return len(new)


def escalate_due(store: Store, now: datetime, limit: int = 500) -> list[int]:
    """Promote open warnings that are due (by time or by failures); return their alert ids.

    Time spent in a maintenance window does not count: `holds.defer_escalations` first
    moves escalate_at of the due warnings that spent some, in this transaction.
    """
    from tickwarden import holds

    holds.defer_escalations(store, now, limit)
    escalated = store.escalate_due_alerts(now, limit)
    notify(store, [t.event_id for t in escalated], now)
    return [t.alert_id for t in escalated]


def reassign(db: Database, alert_id: int, owner: str, note: str | None, actor: str, now: datetime) -> Alert:
    """Hand an open alert to `owner` with a note; the owner then stays until reassigned again."""
    if owner not in OWNERS:
        raise InvalidInput(f"Owner {owner!r} is not valid: use engineering or customer.")
    clean_note = _clean_note(note) if note else None
    with db.transaction() as store:
        alert = store.lock_alert(alert_id)
        if alert is None:
            raise NotFound(f"There is no alert {alert_id}.")
        if alert.status != "open":
            raise Conflict(f"Alert {alert_id} is already resolved; only open alerts can be reassigned.")
        event = store.reassign_alert(alert_id, owner, alert.owner, clean_note, _clean_actor(actor), now)
        assert event is not None  # the row lock above makes the compare-and-set match
        notify(store, [event.id], now)
        view = store.get_alert(alert_id)
        assert view is not None
        return view.alert


def add_note(db: Database, alert_id: int, note: str, actor: str, now: datetime, *, internal: bool = False
             ) -> AlertEvent:
    """Append a note to an alert's history and thread; an internal note never reaches the tenant."""
    clean = _clean_note(note)
    if not clean:
        raise InvalidInput("The note is empty.")
    with db.transaction() as store:
        event = store.add_alert_note(alert_id, clean, _clean_actor(actor), now, internal=internal)
        if event is None:
            raise NotFound(f"There is no alert {alert_id}.")
        notify(store, [event.id], now)
        return event


def acknowledge(db: Database, alert_id: int, actor: str, now: datetime, note: str | None = None, *,
                also: Callable[[Store], None] | None = None) -> AlertEvent:
    """Acknowledge an open alert: someone is on it, so escalation stops; the alert stays open.

    `also` runs in the same transaction after the transition (a signed link records its
    use there); raising from it rolls the acknowledgement back.
    """
    return _by_hand(db, alert_id, "acknowledged", now,
                    lambda store, clean: store.acknowledge_alert(alert_id, _clean_actor(actor), clean, now),
                    note, already="is already acknowledged", also=also)


def snooze(db: Database, alert_id: int, seconds: int, actor: str, now: datetime, note: str | None = None
           ) -> AlertEvent:
    """Hold an open alert's escalation for `seconds`; a later snooze replaces the time."""
    if not 60 <= seconds <= MAX_SNOOZE_SECONDS:
        raise InvalidInput("A snooze lasts from 1 minute to 30 days.")
    until = now + timedelta(seconds=seconds)
    return _by_hand(db, alert_id, "snoozed", now,
                    lambda store, clean: store.snooze_alert(alert_id, until, _clean_actor(actor), clean, now), note)


def resolve(db: Database, alert_id: int, note: str, actor: str, now: datetime) -> AlertEvent:
    """Resolve an open alert by hand, saying why; a new failure streak opens a new alert."""
    if not note or not _clean_note(note):
        raise InvalidInput("Resolving an alert by hand needs a note saying why.")
    return _by_hand(db, alert_id, "resolved", now,
                    lambda store, clean: store.resolve_alert_by_hand(alert_id, _clean_actor(actor), clean or "", now), note)


PAUSED_NOTE = "The workflow is paused: no ticks until it is resumed."
ARCHIVED_NOTE = "The workflow is archived: no ticks until its file is applied again."


def note_paused(store: Store, workflow_id: int, actor: str, now: datetime, note: str = PAUSED_NOTE
                ) -> list[AlertEvent]:
    """Tell the thread of the workflow's open alert, if any, that the workflow was paused (caller's transaction)."""
    events = store.note_workflow_paused(workflow_id, _clean_actor(actor), note, now)
    notify(store, [e.id for e in events], now)
    return events


def _by_hand(db: Database, alert_id: int, kind: str, now: datetime,
             write: Callable[[Store, str | None], AlertEvent | None], note: str | None,
             already: str | None = None, also: Callable[[Store], None] | None = None) -> AlertEvent:
    """Lock the alert, check it is open, write the transition and its event, fan it out."""
    clean = _clean_note(note) if note else None
    with db.transaction() as store:
        alert = store.lock_alert(alert_id)
        if alert is None:
            raise NotFound(f"There is no alert {alert_id}.")
        if alert.status != "open":
            raise Conflict(f"Alert {alert_id} is already resolved; only open alerts can be {kind}.")
        event = write(store, clean or None)
        if event is None:  # the compare-and-set matched nothing under the row lock: already done
            raise Conflict(f"Alert {alert_id} {already or 'did not change'}.")
        if also is not None:
            also(store)
        notify(store, [event.id], now)
        return event


def _clean_note(note: str) -> str:
    # Notes are typed by people and may be sent to channels: same minimisation as errors.
    return sanitize_error(note, limit=MAX_NOTE).strip()


def _clean_actor(actor: str) -> str:
    return sanitize_error(actor or "tickwarden", limit=100) or "tickwarden"
