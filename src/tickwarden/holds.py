"""What a maintenance window does to deliveries and escalation: the one place it is decided.

Deliveries::

    enqueue (alerts.notify)             ──► hold_new: the alert's workflow is covered at `now`?
          │ no                                   │ yes
          ▼                                      ▼
       pending ──► notifier              held (next_attempt_at = end of the covering span)
                                                 │ notifier pass at or after that end: release_due
                                                 ▼
                     still covered (a chained or new window)? ── yes ──► held until the new end
                                                 │ no
                                                 ▼
            per alert and channel, one row goes out at once ('pending'), the rest 'suppressed':
              * the alert resolved and the channel never heard of it  → none (opened and
                resolved inside the window sends nothing)
              * the alert resolved                                    → its `resolved`
              * still open                                            → the latest `escalated` or
                `opened` (the one that carries the alert's current severity), else the latest row

So an alert still open when the window ends is delivered once, at its current
severity, in the thread it would have had; nothing held is replayed. Every
decision takes `now` from the caller (the injected clock); no SQL reads the time.

Escalation: an open warning's time rule (escalate_at = opened_at + multiplier ×
cadence) counts only time outside the windows of its workflow. `defer_escalations`
runs at the start of each escalation pass and moves escalate_at of the due warnings
that spent time in maintenance to the instant at which that much time outside
windows has passed (always recomputed from opened_at, so it is idempotent); the
escalation pass then promotes only those that are really due. Escalation by
failure count is state, not time: it still happens inside a window and is
delivered at the end as the alert's current severity.

Replicas: holding happens in the transaction that writes the outbox rows, on rows
nobody can have claimed yet; a release locks its alerts (SKIP LOCKED), so each
alert's held rows are decided once; deferral locks the alerts the escalation pass
would lock and writes escalate_at with a compare-and-set.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from tickwarden.maintenance import covered_until, deadline_outside
from tickwarden.store.maintenance import HeldRow

if TYPE_CHECKING:
    from tickwarden.store import Store
    from tickwarden.store.outbox import NewDelivery

RELEASE_BATCH = 200


def hold_new(store: Store, new: Sequence[NewDelivery], now: datetime) -> int:
    """Hold the new outbox rows whose alert's workflow is in maintenance at `now`; return how many.

    `new` is what the fan-out returned (`enqueue_notifications`): each row's workflow only
    where a window could cover it at all, and when its thread's earlier held rows go out.
    """
    scope = {row_id: (wf, behind) for row_id, wf, behind in new if wf is not None}
    if not scope:  # the usual case: no window anywhere near these alerts
        return 0
    windows = store.maintenance.for_workflows([wf for wf, _ in scope.values()])
    ends = {wf: covered_until(found, now) for wf, found in windows.items()}
    holds = []
    for row_id, (wf, behind) in scope.items():
        # covered now; or written after a window ended while the thread's held rows await
        # their release: it joins them, so the release decides the whole thread at once
        end = ends.get(wf) or behind
        if end is not None:
            holds.append((row_id, end))
    return store.maintenance.hold_outbox(holds)


def choose_release(rows: Sequence[HeldRow], alert_status: str) -> int | None:
    """Pick the one held row of an (alert, channel) to deliver at a window's end, or None."""
    if not rows:
        return None
    heard = any(r.heard for r in rows)
    if alert_status == "resolved":
        if not heard:
            return None
        resolved = [r for r in rows if r.kind == "resolved"]
        return resolved[-1].id if resolved else None
    severity_rows = [r for r in rows if r.kind in ("opened", "escalated")]
    return (severity_rows or list(rows))[-1].id


def release_due(store: Store, now: datetime, limit: int = RELEASE_BATCH) -> int:
    """Release the held deliveries whose window has ended (caller's transaction); return rows released.

    1. Lock the alerts with held rows due at `now` (SKIP LOCKED).
    2. An alert whose workflow is covered again at `now` stays held until the new end.
    3. For the others, choose one row per channel (`choose_release`) and suppress the rest.
    """
    alerts = store.maintenance.claim_held_alerts(now, limit)
    if not alerts:
        return 0
    windows = store.maintenance.for_workflows([a.workflow_id for a in alerts])
    releasing = []
    for alert in alerts:
        until = covered_until(windows.get(alert.workflow_id, []), now)
        if until is not None:
            store.maintenance.extend_holds([alert.alert_id], until)
        else:
            releasing.append(alert)
    if not releasing:
        return 0
    status = {a.alert_id: a.status for a in releasing}
    groups: dict[tuple[int, int], list[HeldRow]] = {}
    for row in store.maintenance.held_rows(list(status)):
        groups.setdefault((row.alert_id, row.channel_id), []).append(row)
    chosen = [row_id for (alert_id, _), rows in groups.items()
              if (row_id := choose_release(rows, status[alert_id])) is not None]
    store.maintenance.release_outbox(list(status), chosen, now)
    return len(chosen)


def defer_escalations(store: Store, now: datetime, limit: int = 500) -> int:
    """Move escalate_at of due warnings past the maintenance time they spent; return how many moved."""
    candidates = store.maintenance.escalation_candidates(now, limit)
    if not candidates:
        return 0
    windows = store.maintenance.for_workflows([c.workflow_id for c in candidates])
    moved = 0
    for alert in candidates:
        budget = timedelta(seconds=alert.escalation_multiplier * alert.cadence_seconds)
        due = deadline_outside(windows.get(alert.workflow_id, []), alert.opened_at, budget)
        if due > now and store.maintenance.defer_escalation(alert.id, alert.escalate_at, due):
            moved += 1
    return moved
