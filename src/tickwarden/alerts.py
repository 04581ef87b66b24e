"""Alerting: one state per broken workflow, not one message per failure; decided, applied and reported here.

::

                    evaluation: failures ≥ alert_after
                                   │
                                   ▼  event `opened` (notifies)
     ┌───────────────────── open(first_severity) ◄──┐ later confirmed failure:
     │                        │    │    │           │ count, error, owner updated
     │                        │    │    └───────────┘ event `failed` (history only)
     │  escalate_at ≤ now, or │    │
     │  failures reached      │    ├── reassign    (event `reassigned`, pins the owner)
     │  escalation (the one   │    ├── acknowledge (event `acknowledged`: escalation stops, stays open)
     │  rule: a column)       │    ├── snooze      (event `snoozed`: no escalation until a time)
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
alert by hand (`owner_pinned`, set by the reassignment); from then on it stays where
they put it.

"Escalate after N failures" is defined once, by the generated column
`alerts.failures_reached_escalation` (failure_count − manual_failures ≥ escalate_after,
migration 0022): opening an alert and recording a failure return it for the warning
they wrote, the evaluation escalates those (`monitoring_escalate_alerts`, which reads it
again), the escalation clock selects on it, and no Python compares a count with the
threshold. A manual run's failure is history, never
a step towards escalation.

Evaluation never keeps a counter. For each workflow it recounts the consecutive
confirmed failures (runs `failed` or `missed`, newest first by tick, stopping at the
newest success; one statement for a whole batch) and compares the count with the
workflow's profile (`profile.derive_profile(cadence or 1 day, policy_overrides)`):

1. monitoring disabled                           → nothing (not evaluated)
2. no failure since the newest success           → resolve the open alert, if any
3. failures < alert_after and no open alert      → not yet
4. failures ≥ alert_after and no open alert      → open at the profile's first severity
5. an open alert and more failures than recorded → record the failure on it (count, error, owner)

Beside the streak, the failure-rate rule (`profile.rate_window` > 0) catches a job that
fails every other tick and so never builds a streak. It recounts the failures among the
last `rate_window` confirmed scheduled ticks (only where it can change the decision):

3a. failures < alert_after, no open alert, a full window
    and failed ticks ≥ rate_threshold × window     → open with reason `failure_rate`
2a. a `failure_rate` alert and no failure since the
    newest success, but the window's rate is still
    ≥ rate_resolve_below                            → keep it open (no flapping of the alert itself)

Manual runs are runs like any other: a manual success resolves (rule 2), a manual
failure only ever updates the one open alert (rule 5; the partial unique index
alerts_one_open_idx makes a second open alert impossible).

Replicas: an evaluation takes a per-workflow advisory lock before it reads, so two
evaluations of one workflow run one after the other and the second sees the first
one's writes. Every transition is one statement that changes the alert with a
compare-and-set and writes its event row (`store/monitoring.sql`), and its events go
to the outbox (`notify`) in the same transaction: a notification is never lost (the
outbox row commits with the state) and never doubled (a replica whose compare-and-set
matched nothing wrote no event; UNIQUE (event, channel) besides). The escalation
clock selects due warnings with `FOR UPDATE SKIP LOCKED`.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tickwarden import holds
from tickwarden.categories import owner_for
from tickwarden.db import Database
from tickwarden.errors import Conflict, InvalidInput, InvalidPolicy, NotFound
from tickwarden.models import Alert, AlertEvent
from tickwarden.profile import UNSCHEDULED_CADENCE_SECONDS, Profile, derive_profile
from tickwarden.sanitize import clean_actor, sanitize_error
from tickwarden.store import Store
from tickwarden.store.monitoring import EvaluationInput, FailureRate, FailureUpdate, OpenAlert, RateProfile

log = logging.getLogger(__name__)

OWNERS = ("engineering", "customer")
MAX_NOTE = 1000
MAX_SNOOZE_SECONDS = 30 * 86400


# What `decide` wants done to one workflow's alert state: open one, record a later failure on
# it, resolve it (alert id, resolving run id), or nothing. The statements' own rows, so the
# decision is applied without another copy.
Change = OpenAlert | FailureUpdate | tuple[int, int | None] | None


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
    # Outbox rows the events made (`notify`): what wakes a notifier (outbox_wake_notifier is
    # sent only with new rows), unlike `event_ids`, whose `failed` events are history only.
    notified: int = 0
    # The earliest instant at which an alert this evaluation opened or counted a failure on
    # could be the escalation clock's work (a lower bound: see `_apply`); None when none can.
    escalation_due: datetime | None = None

    def merge(self, other: EvaluationReport) -> None:
        self.evaluated += other.evaluated
        self.opened += other.opened
        self.updated += other.updated
        self.escalated += other.escalated
        self.resolved += other.resolved
        self.event_ids += other.event_ids
        self.failed_workflows += other.failed_workflows
        self.notified += other.notified
        self.note_escalation_due(other.escalation_due)

    def note_escalation_due(self, due: datetime | None) -> None:
        if due is not None and (self.escalation_due is None or due < self.escalation_due):
            self.escalation_due = due


@functools.lru_cache(maxsize=4096)
def _cached_profile(cadence_seconds: int, overrides_json: str) -> Profile:
    return derive_profile(cadence_seconds, json.loads(overrides_json) or None)


def profile_of(cadence_seconds: int | None, overrides: dict[str, Any] | str | None) -> Profile:
    """Return the workflow's profile (cached: thousands of workflows share a handful).

    `overrides` may be the stored JSON text itself (the evaluation reads it so): it is then
    the cache key as it is, and a workflow evaluated again costs no parse and no dump.
    """
    text = overrides if isinstance(overrides, str) else json.dumps(overrides or {}, sort_keys=True)
    return _cached_profile(cadence_seconds or UNSCHEDULED_CADENCE_SECONDS, text)


# The profiles with a failure-rate rule the evaluations have met (at most RATE_PROFILES of them),
# listed to the evaluation's statement so that it counts the rate where the rules need it, in
# the same round trip (`monitoring_evaluation_inputs`); the rate of a workflow whose profile
# is not listed yet is counted by a statement of its own. A fleet shares a handful of
# profiles; each evaluated workflow's row scans the list, hence the bound. Replaced whole,
# never changed in place: the loops' threads read it without a lock (an addition lost to a
# race is only learned again).
RATE_PROFILES = 32
_rate_profiles: tuple[RateProfile, ...] = ()


def _learn_rate_profile(inp: EvaluationInput) -> None:
    global _rate_profiles
    if len(_rate_profiles) >= RATE_PROFILES or not isinstance(inp.policy_overrides, str):
        return
    cadence = inp.cadence_seconds or UNSCHEDULED_CADENCE_SECONDS
    if any(p[0] == cadence and p[1] == inp.policy_overrides for p in _rate_profiles):
        return
    profile = profile_of(cadence, inp.policy_overrides)
    if profile.rate_window:
        _rate_profiles = (*_rate_profiles, (cadence, inp.policy_overrides, profile.rate_window, profile.alert_after))


def rate_window_needed(inp: EvaluationInput) -> int:
    """Return how many ticks to recount for `inp`'s failure rate, or 0 when the rate cannot change the decision."""
    if not inp.monitoring_enabled:
        return 0
    profile = profile_of(inp.cadence_seconds, inp.policy_overrides)
    if not profile.rate_window:
        return 0
    if inp.alert_id is None:
        return profile.rate_window if 0 < inp.failures < profile.alert_after else 0
    return profile.rate_window if inp.alert_reason == "failure_rate" and inp.failures == 0 else 0


def decide(inp: EvaluationInput, now: datetime, rate: FailureRate | None = None) -> Change:
    """Apply the rules of the module docstring to one workflow's evaluation input (and its failure rate, if counted)."""
    if not inp.monitoring_enabled:
        return None
    profile = profile_of(inp.cadence_seconds, inp.policy_overrides)
    if inp.failures == 0:
        if inp.alert_id is not None and inp.success_run_id is not None:
            if rate is not None and rate.ticks and rate.failures >= profile.rate_resolve_below * rate.ticks:
                return None  # rule 2a: the rate has not fallen back yet
            return (inp.alert_id, inp.success_run_id)
        return None

    last_failure_at = inp.last_failure_at or now
    if inp.alert_id is None:
        reason = "consecutive_failures"
        if inp.failures < profile.alert_after:
            if not _rate_reached(profile, rate):
                return None  # not yet
            reason = "failure_rate"
        cadence = inp.cadence_seconds or UNSCHEDULED_CADENCE_SECONDS
        owner = owner_for(inp.last_error_category)
        error = sanitize_error(inp.last_error) if inp.last_error else None
        return OpenAlert(
            tenant_id=inp.tenant_id,
            workflow_id=inp.workflow_id,
            severity=profile.first_severity,
            owner=owner,
            failure_count=inp.failures,
            cadence_seconds=cadence,
            escalation_multiplier=profile.escalation_multiplier,
            escalate_after=profile.escalate_after,
            escalate_at=profile.escalate_at(now, cadence),
            shadow=inp.shadow,
            first_failure_at=inp.first_failure_at or last_failure_at,
            last_failure_at=last_failure_at,
            run_id=inp.last_failure_run_id,
            category=inp.last_error_category,
            error=error,
            failed_step=inp.last_failed_step,
            reason=reason,
        )

    if inp.failures <= (inp.alert_failure_count or 0):
        return None  # this failure is already on the alert
    # Sanitized only here and on opening: most failures decide nothing, and redaction is the
    # costliest step of a decision.
    owner = owner_for(inp.last_error_category)
    error = sanitize_error(inp.last_error) if inp.last_error else None
    return FailureUpdate(
        alert_id=inp.alert_id,
        failure_count=inp.failures,
        last_failure_at=last_failure_at,
        run_id=inp.last_failure_run_id,
        category=inp.last_error_category,
        error=error,
        failed_step=inp.last_failed_step,
        owner=owner,
    )


def _rate_reached(profile: Profile, rate: FailureRate | None) -> bool:
    # A full window only: three ticks after a deploy are no rate to page on.
    return (rate is not None and profile.rate_window > 0 and rate.ticks >= profile.rate_window
            and rate.failures >= profile.rate_threshold * rate.ticks)


def evaluate_workflows(store: Store, workflow_ids: Iterable[int], now: datetime) -> EvaluationReport:
    """Evaluate a batch of workflows inside the caller's transaction.

    1. Lock the workflows' evaluation locks (ascending, so batches never deadlock).
    2. Read every input in one statement.
    3. Decide per workflow in Python (a fault in one workflow's settings is logged
       and skips only that workflow).
    4. Apply all decisions set-based and fan the events out to the outbox (`_apply`).
    """
    ids = sorted(set(workflow_ids))
    report = EvaluationReport()
    if not ids:
        return report
    store.monitoring.lock_workflows_for_evaluation(ids)
    inputs = store.monitoring.evaluation_inputs(ids, _rate_profiles, UNSCHEDULED_CADENCE_SECONDS, now)
    needed, windows = set(), {}  # workflows whose rate the rules need; those of them still to count
    rates: dict[int, FailureRate] = {}
    for inp in inputs:
        try:
            _learn_rate_profile(inp)
            if n := rate_window_needed(inp):
                needed.add(inp.workflow_id)
                if inp.rate_window == n:  # counted with the inputs, over this very window
                    rates[inp.workflow_id] = FailureRate(inp.workflow_id, inp.rate_ticks, inp.rate_failures)
                else:
                    windows[inp.workflow_id] = n
        except (InvalidPolicy, TypeError, ValueError):
            continue  # bad settings: decide() below meets them again, logs once and skips the workflow
    rates.update(store.monitoring.failure_rates(windows, now))
    changes: list[Change] = []
    for inp in inputs:
        try:
            rate = None
            if inp.workflow_id in needed:  # no terminal tick at all is a count of zero, not "not counted"
                rate = rates.get(inp.workflow_id) or FailureRate(inp.workflow_id, 0, 0)
            changes.append(decide(inp, now, rate))
        except Exception as exc:  # one workflow's bad settings must not stop the others
            log.error("evaluation of workflow %d failed: %s", inp.workflow_id, _describe(exc))
            report.failed_workflows.append(inp.workflow_id)
    report.evaluated = len(changes)
    _apply(store, changes, now, report)
    return report


def evaluate_batch(store: Store, workflow_ids: Iterable[int], now: datetime) -> tuple[EvaluationReport, list[int]]:
    """Evaluate a batch under a savepoint of the caller's transaction; return the report and what to redo.

    A fault rolls back only the savepoint, so the caller's own work (the poller's
    claim) still commits; the workflows are returned to be evaluated one by one.
    """
    ids = sorted(set(workflow_ids))
    if not ids:
        return EvaluationReport(), []
    try:
        with store.conn.transaction():
            return evaluate_workflows(store, ids, now), []
    except Exception as exc:
        log.warning("batch evaluation of %d workflow(s) failed (%s); evaluating one by one", len(ids), _describe(exc))
        return EvaluationReport(), ids


def evaluate_each(db: Database, workflow_ids: Iterable[int], now: datetime) -> EvaluationReport:
    """Evaluate each workflow in its own transaction; a fault is logged (one sanitized line) and skipped.

    Each transaction runs the plans the server keeps, as the pass whose batch evaluation
    faulted did (`send_generic_plans`, riding with its BEGIN and its first read): planned
    afresh, the evaluation's statements over a ledger of many months cost a few milliseconds
    of planning per workflow, and this runs one workflow at a time.
    """
    report = EvaluationReport()
    for wid in sorted(set(workflow_ids)):
        try:
            with db.transaction(pipelined=True) as store:
                store.execution.send_generic_plans()
                report.merge(evaluate_workflows(store, [wid], now))
        except Exception as exc:
            log.error("evaluation of workflow %d failed: %s", wid, _describe(exc))
            report.failed_workflows.append(wid)
    return report


def _apply(store: Store, changes: Sequence[Change], now: datetime, report: EvaluationReport) -> None:
    """Apply a batch of decisions set-based, in the caller's transaction, and fan the events out.

    Opening comes first (ON CONFLICT on the one-open index: a racing opener wins once), so
    a warning that opens with enough failures escalates in the same pass, after its
    `opened` event. Which warnings reached escalation, the statements say from the one
    column that defines it; the escalation statement checks it again under its
    compare-and-set (with acknowledgement and snooze).
    """
    opened = store.monitoring.open_alerts([c for c in changes if isinstance(c, OpenAlert)], now)
    updated = store.monitoring.record_alert_failures([c for c in changes if isinstance(c, FailureUpdate)], now)
    escalated = store.monitoring.escalate_alerts([t.alert_id for t in (*opened, *updated) if t.escalates], "failures", now)
    resolved = store.monitoring.resolve_alerts([c for c in changes if isinstance(c, tuple)], now)
    event_ids = [t.event_id for t in (*opened, *updated, *escalated, *resolved)]
    # A recorded failure's event is `failed`, history only: the fan-out never routes it
    # (outbox_enqueue_notifications' kinds), so a batch that only counted failures up
    # skips the statement.
    report.notified += notify(store, [t.event_id for t in (*opened, *escalated, *resolved)], now)
    report.opened += [t.alert_id for t in opened]
    report.updated += [t.alert_id for t in updated]
    report.escalated += [t.alert_id for t in escalated]
    report.resolved += [t.alert_id for t in resolved]
    report.event_ids += event_ids
    # What the escalation clock's look (monitoring_escalation_waiting) may find sooner now, at
    # the earliest: an opened warning that was not promoted at once escalates by time at its
    # escalate_at (written as decided here; a maintenance window's deferral only moves it
    # later), and a warning whose failures reached escalation that the compare-and-set left a
    # warning (snoozed) from now. A failure counted short of escalation leaves its alert's
    # escalate_at as it was; a resolve or a promotion only takes work away.
    promoted = {t.workflow_id for t in escalated}
    dues = [c.escalate_at for c in changes
            if isinstance(c, OpenAlert) and c.severity == "warning" and c.workflow_id not in promoted]
    if any(t.escalates and t.workflow_id not in promoted for t in (*opened, *updated)):
        dues.append(now)
    report.note_escalation_due(min(dues, default=None))


def notify(store: Store, event_ids: Sequence[int], now: datetime) -> int:
    """Write the outbox rows of these events and hold those a maintenance window covers; return how many.

    Every alert event reaches the outbox through here, so this is the one place a
    maintenance window stops a delivery (`holds.hold_new`), in the event's transaction.
    """
    new = store.outbox.enqueue_notifications(event_ids, now)
    holds.hold_new(store, new, now)
    return len(new)


class EscalationClock:
    """Each minute, promotes the open warnings nobody acted on: due by time, or by failures.

    A warning becomes critical at `escalate_at = opened_at + multiplier × cadence` (the
    cadence captured at open, so editing the schedule mid-incident does not move it), or
    when its failures reached escalation and the evaluation could not promote it (it was
    acknowledged or snoozed then). Time spent in a maintenance window does not count:
    `holds.defer_escalations` first moves escalate_at of the due warnings that spent some.
    """

    name = "escalation"

    def __init__(self, db: Database, *, interval_seconds: float = 60, batch_size: int = 500):
        self.db = db
        self.interval = timedelta(seconds=interval_seconds)
        self.batch_size = batch_size
        self.last: list[int] = []

    def run_once(self, now: datetime) -> datetime:
        with self.db.probe() as store:
            waiting = store.monitoring.escalations_waiting(now)
        if not waiting:  # the usual pass: one read-only statement
            self.last = []
            return now + self.interval
        with self.db.transaction() as store:
            holds.defer_escalations(store, now, self.batch_size)
            escalated = store.monitoring.escalate_due_alerts(now, self.batch_size)
            notify(store, [t.event_id for t in escalated], now)
        self.last = [t.alert_id for t in escalated]
        if len(self.last) >= self.batch_size:
            return now + timedelta(seconds=1)
        return now + self.interval


def reassign(db: Database, alert_id: int, owner: str, note: str | None, actor: str, now: datetime) -> Alert:
    """Hand an open alert to `owner` with a note; the owner then stays until reassigned again."""
    if owner not in OWNERS:
        raise InvalidInput(f"Owner {owner!r} is not valid: use engineering or customer.")
    clean_note = _clean_note(note) if note else None
    with db.transaction() as store:
        alert = store.monitoring.lock_alert(alert_id)
        if alert is None:
            raise NotFound(f"There is no alert {alert_id}.")
        if alert.status != "open":
            raise Conflict(f"Alert {alert_id} is already resolved; only open alerts can be reassigned.")
        event = store.monitoring.reassign_alert(alert_id, owner, alert.owner, clean_note, clean_actor(actor), now)
        assert event is not None  # the row lock above makes the compare-and-set match
        notify(store, [event.id], now)
        view = store.monitoring.get_alert(alert_id)
        assert view is not None
        return view.alert


def add_note(db: Database, alert_id: int, note: str, actor: str, now: datetime, *, internal: bool = False
             ) -> AlertEvent:
    """Append a note to an alert's history and thread; an internal note never reaches the tenant."""
    clean = _clean_note(note)
    if not clean:
        raise InvalidInput("The note is empty.")
    with db.transaction() as store:
        event = store.monitoring.add_alert_note(alert_id, clean, clean_actor(actor), now, internal=internal)
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
                    lambda store, clean: store.monitoring.acknowledge_alert(alert_id, clean_actor(actor), clean, now),
                    note, already="is already acknowledged", also=also)


def snooze(db: Database, alert_id: int, seconds: int, actor: str, now: datetime, note: str | None = None
           ) -> AlertEvent:
    """Hold an open alert's escalation for `seconds`; a later snooze replaces the time."""
    if not 60 <= seconds <= MAX_SNOOZE_SECONDS:
        raise InvalidInput("A snooze lasts from 1 minute to 30 days.")
    until = now + timedelta(seconds=seconds)
    return _by_hand(db, alert_id, "snoozed", now,
                    lambda store, clean: store.monitoring.snooze_alert(alert_id, until, clean_actor(actor), clean, now), note)


def resolve(db: Database, alert_id: int, note: str, actor: str, now: datetime) -> AlertEvent:
    """Resolve an open alert by hand, saying why; a new failure streak opens a new alert."""
    if not note or not _clean_note(note):
        raise InvalidInput("Resolving an alert by hand needs a note saying why.")
    return _by_hand(db, alert_id, "resolved", now,
                    lambda store, clean: store.monitoring.resolve_alert_by_hand(alert_id, clean_actor(actor), clean or "", now), note)


PAUSED_NOTE = "The workflow is paused: no ticks until it is resumed."
ARCHIVED_NOTE = "The workflow is archived: no ticks until its file is applied again."


def note_paused(store: Store, workflow_id: int, actor: str, now: datetime, note: str = PAUSED_NOTE
                ) -> list[AlertEvent]:
    """Tell the thread of the workflow's open alert, if any, that the workflow was paused (caller's transaction)."""
    events = store.monitoring.note_workflow_paused(workflow_id, clean_actor(actor), note, now)
    notify(store, [e.id for e in events], now)
    return events


def _by_hand(db: Database, alert_id: int, kind: str, now: datetime,
             write: Callable[[Store, str | None], AlertEvent | None], note: str | None,
             already: str | None = None, also: Callable[[Store], None] | None = None) -> AlertEvent:
    """Lock the alert, check it is open, write the transition and its event, fan it out."""
    clean = _clean_note(note) if note else None
    with db.transaction() as store:
        alert = store.monitoring.lock_alert(alert_id)
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


def _describe(exc: BaseException) -> str:
    return sanitize_error(f"{type(exc).__name__}: {exc}")
