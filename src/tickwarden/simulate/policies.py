"""Alerting policies to compare on the same scenario: tickwarden's own and four baselines.

Every policy runs through the same simulated pipeline; a baseline only changes the
retry budget and threshold every workflow gets, and how messages are counted:

| policy          | modelled on                 | retries | messages                                                        |
|-----------------|-----------------------------|---------|-----------------------------------------------------------------|
| tickwarden      | this project                | cadence | alert state: opened, escalated, reassigned, resolved, threaded  |
| streak-only     | tickwarden without the failure-rate rule | cadence | as tickwarden (the "before" of that rule)         |
| naive           | the old one-message scheduler | 0     | one message per failed (or missed) run, each its own thread      |
| fixed-retries   | Airflow `retries=N`         | N (2), 5 min apart | one message per run that failed after its retries     |
| first-failure   | Healthchecks.io             | 0       | "down" on the first failure, "up" on the next success            |
| threshold       | Sentry Crons                | 0       | opens after N (3) consecutive failures, resolves on a success    |

Messages are counted per channel: every policy notifies the tenant's channel and the
platform's, as tickwarden does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tickwarden.simulate.engine import SimulationOutcome

FIXED_RETRIES = 2
FIXED_RETRY_DELAY = 300  # Airflow's default retry_delay
THRESHOLD = 3


@dataclass(frozen=True)
class Policy:
    name: str
    summary: str
    overrides: dict[str, Any] = field(default_factory=dict)
    per_failed_run: bool = False  # messages are one per failed run rather than alert events
    replace_policy: bool = True  # False: the overrides go on top of each workflow's own policy


POLICIES: dict[str, Policy] = {
    "tickwarden": Policy("tickwarden", "cadence-derived retries and thresholds, alerts as state"),
    "streak-only": Policy("streak-only", "tickwarden with the failure-rate rule off: the consecutive-failure streak only",
                          {"rate_window": 0}, replace_policy=False),
    "naive": Policy("naive", "one message per failed run, no retries", {"retries": 0}, per_failed_run=True),
    "fixed-retries": Policy(
        "fixed-retries", f"{FIXED_RETRIES} retries {FIXED_RETRY_DELAY} s apart, then one message per failed run",
        {"retries": FIXED_RETRIES, "backoff_seconds": [FIXED_RETRY_DELAY]},
        per_failed_run=True,
    ),
    "first-failure": Policy(
        "first-failure", "alert on the first failure, resolve on success",
        {"retries": 0, "alert_after": 1, "first_severity": "critical", "rate_window": 0},
    ),
    "threshold": Policy(
        "threshold", f"alert after {THRESHOLD} consecutive failures, resolve on success",
        {"retries": 0, "alert_after": THRESHOLD, "first_severity": "critical", "rate_window": 0},
    ),
}


def get_policy(name: str) -> Policy:
    from tickwarden.errors import InvalidInput

    try:
        return POLICIES[name]
    except KeyError:
        raise InvalidInput(f"Unknown policy {name!r}; choose one of {', '.join(POLICIES)}.") from None


def apply_message_rule(outcome: SimulationOutcome, policy: Policy) -> SimulationOutcome:
    """Replace alerts and notifications by the policy's own rule where it is not alert state.

    A per-failed-run policy has no alert state: each failed or missed run is its own
    "alert", opened when the run's verdict was written, with one message per channel.
    """
    from tickwarden.simulate.engine import SimulationOutcome

    if not policy.per_failed_run:
        return outcome
    alerts: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    notifications: list[dict[str, Any]] = []
    failed = sorted(
        (r for r in outcome.runs if r["status"] in ("failed", "missed") and r["finished_at"] is not None),
        key=lambda r: (r["finished_at"], r["id"]),
    )
    for number, run in enumerate(failed, start=1):
        alerts.append(
            {
                "id": number, "tenant": run["tenant"], "workflow": run["workflow"], "first_severity": "critical",
                "severity": "critical", "status": "open", "opened_at": run["finished_at"], "escalated_at": None,
                "resolved_at": None, "failure_count": 1, "owner": "engineering", "downtime_seconds": None,
                "last_error": run["error"], "reason": "failed_run",
            }
        )
        events.append(
            {
                "id": number, "alert_id": number, "kind": "opened", "at": run["finished_at"], "severity": "critical",
                "owner": "engineering", "note": None, "tenant": run["tenant"], "workflow": run["workflow"],
                "failure_count": 1,
            }
        )
        for channel in (run["tenant"], "platform"):
            notifications.append(
                {
                    "id": len(notifications) + 1, "at": run["finished_at"], "tenant": run["tenant"],
                    "workflow": run["workflow"], "alert": number, "event": "opened", "severity": "critical",
                    "channel": channel, "thread": f"{channel}-message-{number}",
                }
            )
    return SimulationOutcome(
        scenario=outcome.scenario,
        runs=outcome.runs,
        attempts=outcome.attempts_maker,
        alerts=alerts,
        alert_events=events,
        notifications=notifications,
        extra=outcome.extra,
    )
