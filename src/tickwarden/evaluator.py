"""The evaluator: from a workflow's run history to "alert at this severity", "not yet" or "resolve".

It never keeps a counter. For each workflow it recounts the consecutive confirmed
failures (runs `failed` or `missed`, newest first by tick, stopping at the newest
success: the same walk as `store.count_consecutive_failures`, done for a whole
batch of workflows in one statement) and compares the count with the workflow's
profile (`profile.derive_profile(cadence or 1 day, policy_overrides)`):

1. monitoring disabled                           → nothing (not evaluated)
2. no failure since the newest success           → resolve the open alert, if any
3. failures < alert_after and no open alert      → not yet
4. failures ≥ alert_after and no open alert      → open at the profile's first severity
                                                   (and escalate at once when failures ≥ escalate_after)
5. an open alert and more failures than recorded → record the failure on it (count, error, owner)
6. an open warning and failures ≥ escalate_after → escalate (captured at open)

Beside the streak, the failure-rate rule (`profile.rate_window` > 0) catches a job
that fails every other tick and so never builds a streak. It recounts the failures
among the last `rate_window` confirmed scheduled ticks (`store.failure_rates`, only
for the workflows where it can change the decision):

3a. failures < alert_after, no open alert, a full window
    and failed ticks ≥ rate_threshold × window     → open with reason `failure_rate`
2a. a `failure_rate` alert and no failure since the
    newest success, but the window's rate is still
    ≥ rate_resolve_below                            → keep it open (no flapping of the alert itself)

Its `failure_count` is the streak, as for every alert, so escalation by failures and
by time works unchanged.

Manual runs are runs like any other: a manual success resolves (rule 2), a manual
failure only ever updates the one open alert (rules 5 and 6; the partial unique
index alerts_one_open_idx makes a second open alert impossible).

Replicas: `evaluate_workflows` takes a per-workflow advisory lock before it reads,
so two evaluations of one workflow run one after the other and the second sees the
first one's writes; every write is a compare-and-set besides (see `alerts`).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from tickwarden import alerts
from tickwarden.alerts import Decision, EvaluationReport
from tickwarden.categories import owner_for
from tickwarden.db import Database
from tickwarden.errors import InvalidPolicy
from tickwarden.profile import UNSCHEDULED_CADENCE_SECONDS, Profile, derive_profile
from tickwarden.sanitize import sanitize_error
from tickwarden.store import Store
from tickwarden.store.monitoring import (
    EvaluationInput,
    FailureRate,
    FailureUpdate,
    OpenAlert,
)

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=4096)
def _cached_profile(cadence_seconds: int, overrides_json: str) -> Profile:
    return derive_profile(cadence_seconds, json.loads(overrides_json) or None)


def profile_of(cadence_seconds: int | None, overrides: dict[str, Any] | None) -> Profile:
    """Return the workflow's profile (cached: thousands of workflows share a handful)."""
    return _cached_profile(cadence_seconds or UNSCHEDULED_CADENCE_SECONDS, json.dumps(overrides or {}, sort_keys=True))


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


def decide(inp: EvaluationInput, now: datetime, rate: FailureRate | None = None) -> Decision:
    """Apply the rules of the module docstring to one workflow's evaluation input (and its failure rate, if counted)."""
    wid = inp.workflow_id
    if not inp.monitoring_enabled:
        return Decision(wid, "none")
    profile = profile_of(inp.cadence_seconds, inp.policy_overrides)
    if inp.failures == 0:
        if inp.alert_id is not None and inp.success_run_id is not None:
            if rate is not None and rate.ticks and rate.failures >= profile.rate_resolve_below * rate.ticks:
                return Decision(wid, "none")  # rule 2a: the rate has not fallen back yet
            return Decision(wid, "resolve", resolve=(inp.alert_id, inp.success_run_id))
        return Decision(wid, "none")

    owner = owner_for(inp.last_error_category)
    error = sanitize_error(inp.last_error) if inp.last_error else None
    last_failure_at = inp.last_failure_at or now
    if inp.alert_id is None:
        reason = "consecutive_failures"
        if inp.failures < profile.alert_after:
            if not _rate_reached(profile, rate):
                return Decision(wid, "not_yet", failures=inp.failures)
            reason = "failure_rate"
        cadence = inp.cadence_seconds or UNSCHEDULED_CADENCE_SECONDS
        opening = OpenAlert(
            tenant_id=inp.tenant_id,
            workflow_id=wid,
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
        return Decision(wid, "alert", failures=inp.failures, severity=profile.first_severity, open=opening)

    update = None
    if inp.failures > (inp.alert_failure_count or 0):
        update = FailureUpdate(
            alert_id=inp.alert_id,
            failure_count=inp.failures,
            last_failure_at=last_failure_at,
            run_id=inp.last_failure_run_id,
            category=inp.last_error_category,
            error=error,
            failed_step=inp.last_failed_step,
            owner=inp.alert_owner if inp.owner_pinned and inp.alert_owner else owner,
        )
    escalate = inp.alert_severity == "warning" and inp.failures >= (inp.alert_escalate_after or profile.escalate_after)
    severity = "critical" if escalate else inp.alert_severity
    return Decision(
        wid,
        "alert",
        failures=inp.failures,
        severity=severity,
        update=update,
        escalate_alert_id=inp.alert_id if escalate else None,
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
    4. Apply all decisions set-based and fan the events out to the outbox.
    """
    ids = sorted(set(workflow_ids))
    report = EvaluationReport()
    if not ids:
        return report
    store.lock_workflows_for_evaluation(ids)
    inputs = store.evaluation_inputs(ids)
    windows = {}
    for inp in inputs:
        try:
            if n := rate_window_needed(inp):
                windows[inp.workflow_id] = n
        except (InvalidPolicy, TypeError, ValueError):
            continue  # bad settings: decide() below meets them again, logs once and skips the workflow
    rates = store.failure_rates(windows)
    decisions = []
    for inp in inputs:
        try:
            rate = None
            if inp.workflow_id in windows:  # no terminal tick at all is a count of zero, not "not counted"
                rate = rates.get(inp.workflow_id) or FailureRate(inp.workflow_id, 0, 0)
            decisions.append(decide(inp, now, rate))
        except Exception as exc:  # one workflow's bad settings must not stop the others
            log.error("evaluation of workflow %d failed: %s", inp.workflow_id, _describe(exc))
            report.failed_workflows.append(inp.workflow_id)
    report.evaluated = len(decisions)
    alerts.apply_decisions(store, decisions, now, report)
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
    """Evaluate each workflow in its own transaction; a fault is logged (one sanitized line) and skipped."""
    report = EvaluationReport()
    for wid in sorted(set(workflow_ids)):
        try:
            with db.transaction() as store:
                report.merge(evaluate_workflows(store, [wid], now))
        except Exception as exc:
            log.error("evaluation of workflow %d failed: %s", wid, _describe(exc))
            report.failed_workflows.append(wid)
    return report


def evaluate(db: Database, workflow_ids: Iterable[int], now: datetime) -> EvaluationReport:
    """Evaluate workflows in one transaction; on a fault, one workflow at a time."""
    with db.transaction() as store:
        report, redo = evaluate_batch(store, workflow_ids, now)
    if redo:
        report.merge(evaluate_each(db, redo, now))
    return report


def _describe(exc: BaseException) -> str:
    return sanitize_error(f"{type(exc).__name__}: {exc}")
