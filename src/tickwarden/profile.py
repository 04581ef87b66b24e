"""Cadence profiles: how patient to be with a workflow, derived from its schedule.

A workflow that runs every five minutes will run again in five minutes, so a
failure there warrants patience; a daily workflow will not run again until
tomorrow, so a failure there warrants immediate retries and a fast, severe alert.

Default profile by cadence band (the interval is `cadence.cadence_of`):

| band      | interval          | retries | backoff (s)   | alert after | first severity | escalation × cadence | escalate at failures |
|-----------|-------------------|---------|---------------|-------------|----------------|----------------------|----------------------|
| frequent  | ≤ 15 min          | 0       | —             | 3           | warning        | 6                    | 6                    |
| hourly    | ≤ 2 h             | 1       | 30            | 2           | warning        | 4                    | 4                    |
| intraday  | < 20 h            | 2       | 60, 300       | 1           | warning        | 2                    | 2                    |
| daily     | < 6.5 days        | 3       | 60, 300, 900  | 1           | critical       | 1                    | 1                    |
| weekly    | ≥ 6.5 days        | 3       | 60, 300, 900  | 1           | critical       | 1                    | 1                    |

Along the bands retries never decrease, the threshold never increases and the
severity never softens: rarer means more recovery and faster escalation. Retry n
waits `backoff[n]` after attempt n failed (the last entry repeats), but only when
the failure's category is one that time can heal (`retries.PATIENT_CATEGORIES`); a
deterministic error in customer code is retried at once, so it still pages fast. A warning
is promoted to critical at `opened_at + escalation_multiplier × cadence` (cadence
captured when the alert opens), or as soon as the consecutive confirmed failures
reach `escalate_after`, whichever comes first.

Failure rate ("flapping"): a job failing every other tick never builds a streak, so
beside the streak a warning opens when at least `rate_threshold` of the last
`rate_window` confirmed scheduled ticks failed (the newest tick among them), and it
resolves only once the rate over that window has fallen under `rate_resolve_below`
with the newest tick a success, not on the first success:

| band      | rate window (ticks) | opens at ≥ | resolves under |
|-----------|---------------------|------------|----------------|
| frequent  | 12                  | 50 %       | 25 %           |
| hourly    | 8                   | 50 %       | 25 %           |
| intraday, daily, weekly | off (0) — one failure already opens an alert | — | — |
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tickwarden.errors import InvalidPolicy

Severity = Literal["warning", "critical"]


@dataclass(frozen=True)
class Band:
    name: str
    max_interval_seconds: float  # inclusive upper bound, except for the half-open bands noted
    retries: int
    alert_after: int
    first_severity: Severity
    escalation_multiplier: float
    escalate_after: int
    backoff_seconds: tuple[int, ...]
    inclusive: bool = True
    rate_window: int = 0  # 0: no failure-rate rule (alert_after = 1 already opens on every failure)


# Backoffs grow with the cadence: a daily job rides out a ten-minute warehouse outage
# (1 + 5 + 15 minutes between its attempts) where an hourly one, whose next tick is
# near, waits only half a minute before its single retry.
BANDS: tuple[Band, ...] = (
    Band("frequent", 15 * 60, 0, 3, "warning", 6.0, 6, (), rate_window=12),
    Band("hourly", 2 * 3600, 1, 2, "warning", 4.0, 4, (30,), rate_window=8),
    Band("intraday", 20 * 3600, 2, 1, "warning", 2.0, 2, (60, 300), inclusive=False),
    Band("daily", 6.5 * 86400, 3, 1, "critical", 1.0, 1, (60, 300, 900), inclusive=False),
    Band("weekly", math.inf, 3, 1, "critical", 1.0, 1, (60, 300, 900)),
)

RATE_THRESHOLD = 0.5
RATE_RESOLVE_BELOW = 0.25
MAX_RATE_WINDOW = 100  # the window is recounted from the ledger on every evaluation: keep it an index probe


class PolicyOverrides(BaseModel):
    """Per-workflow overrides of the derived profile; every field optional."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    retries: int | None = Field(default=None, ge=0, le=10)
    alert_after: int | None = Field(default=None, ge=1, le=1000)
    first_severity: Severity | None = None
    escalation_multiplier: float | None = Field(default=None, gt=0, le=10000)
    escalate_after: int | None = Field(default=None, ge=1, le=10000)
    backoff_seconds: tuple[Annotated[int, Field(ge=0, le=86400)], ...] | None = Field(default=None, max_length=10)
    rate_window: int | None = Field(default=None, ge=0, le=MAX_RATE_WINDOW)
    rate_threshold: float | None = Field(default=None, gt=0, le=1)
    rate_resolve_below: float | None = Field(default=None, ge=0, lt=1)

    @field_validator("backoff_seconds", mode="before")
    @classmethod
    def _one_backoff_is_a_list_of_one(cls, value: Any) -> Any:
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _escalation_after_threshold(self) -> PolicyOverrides:
        if self.alert_after is not None and self.escalate_after is not None:
            if self.escalate_after < self.alert_after:
                raise ValueError("escalate_after must be at least alert_after")
        if self.rate_window == 1:
            raise ValueError("rate_window must be 0 (off) or at least 2 ticks")
        return self


@dataclass(frozen=True)
class Profile:
    """Retry budget, alert threshold, first severity and escalation for one workflow."""

    band: str
    interval_seconds: int
    retries: int
    alert_after: int
    first_severity: Severity
    escalation_multiplier: float
    escalate_after: int
    backoff_seconds: tuple[int, ...] = ()
    rate_window: int = 0
    rate_threshold: float = RATE_THRESHOLD
    rate_resolve_below: float = RATE_RESOLVE_BELOW
    overridden: tuple[str, ...] = field(default=())

    def backoffs(self) -> tuple[int, ...]:
        """Return the wait before each of the `retries` retries: the last entry repeats, none means at once."""
        if not self.backoff_seconds:
            return (0,) * self.retries
        tail = self.backoff_seconds[-1]
        return tuple(self.backoff_seconds[i] if i < len(self.backoff_seconds) else tail for i in range(self.retries))

    def escalate_at(self, opened_at: datetime, cadence_seconds: int | None = None) -> datetime:
        """Return when a warning opened at `opened_at` is promoted if nothing else promotes it."""
        cadence = self.interval_seconds if cadence_seconds is None else cadence_seconds
        return opened_at + timedelta(seconds=self.escalation_multiplier * cadence)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["overridden"] = list(self.overridden)
        data["backoff_seconds"] = list(self.backoffs())
        return data


def band_for(interval_seconds: float) -> Band:
    """Return the default band of a cadence."""
    for band in BANDS:
        if interval_seconds < band.max_interval_seconds or (
            band.inclusive and interval_seconds == band.max_interval_seconds
        ):
            return band
    return BANDS[-1]


def parse_overrides(raw: dict[str, Any] | None) -> PolicyOverrides:
    """Validate a mapping of overrides; raise InvalidPolicy with one clear sentence."""
    if raw is None:
        return PolicyOverrides()
    if isinstance(raw, PolicyOverrides):
        return raw
    if not isinstance(raw, dict):
        raise InvalidPolicy("The policy overrides must be a mapping of field to value.")
    try:
        return PolicyOverrides.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "policy"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            allowed = ", ".join(PolicyOverrides.model_fields)
            raise InvalidPolicy(f"Unknown policy field {where!r}; allowed: {allowed}.") from None
        raise InvalidPolicy(f"Policy field {where!r} is not valid: {message[0].lower() + message[1:]}.") from None


def derive_profile(interval_seconds: int, overrides: dict[str, Any] | PolicyOverrides | None = None) -> Profile:
    """Return the profile for a cadence with any overrides applied."""
    band = band_for(interval_seconds)
    values: dict[str, Any] = {
        "retries": band.retries,
        "alert_after": band.alert_after,
        "first_severity": band.first_severity,
        "escalation_multiplier": band.escalation_multiplier,
        "escalate_after": band.escalate_after,
        "backoff_seconds": band.backoff_seconds,
        "rate_window": band.rate_window,
        "rate_threshold": RATE_THRESHOLD,
        "rate_resolve_below": RATE_RESOLVE_BELOW,
    }
    parsed = parse_overrides(overrides if not isinstance(overrides, PolicyOverrides) else overrides.model_dump())
    chosen = parsed.model_dump(exclude_none=True)
    values.update(chosen)
    if "alert_after" in chosen and "escalate_after" not in chosen:
        # Keep the default gap between opening and escalating when only the threshold moves.
        values["escalate_after"] = max(values["alert_after"], band.escalate_after - band.alert_after + values["alert_after"])
    if values["escalate_after"] < values["alert_after"]:
        raise InvalidPolicy(
            f"Policy field 'escalate_after' ({values['escalate_after']}) must be at least 'alert_after' ({values['alert_after']})."
        )
    if values["rate_resolve_below"] >= values["rate_threshold"]:
        raise InvalidPolicy(
            f"Policy field 'rate_resolve_below' ({values['rate_resolve_below']:g}) must be under "
            f"'rate_threshold' ({values['rate_threshold']:g})."
        )
    return Profile(
        band=band.name,
        interval_seconds=int(interval_seconds),
        overridden=tuple(sorted(chosen)),
        **values,
    )


# The cadence assumed for a workflow with no schedule (manual runs only): daily.
UNSCHEDULED_CADENCE_SECONDS = 86400


def default_timeout_seconds(interval_seconds: int) -> int:
    """Return the timeout of a workflow that declares none: its cadence, within [1 min, 1 h]."""
    return int(min(max(interval_seconds, 60), 3600))


def timeout_for(timeout_seconds: int | None, cadence_seconds: int | None) -> int:
    """A workflow's timeout: its own, else its cadence's default (no schedule: the unscheduled cadence's).

    The one rule: the worker's watchdog and the run deadline a tick is given must agree.
    """
    return timeout_seconds or default_timeout_seconds(cadence_seconds or UNSCHEDULED_CADENCE_SECONDS)


def run_deadline(
    scheduled_for: datetime,
    *,
    timeout_seconds: int,
    backoffs: tuple[int, ...],
    interval_seconds: int,
) -> datetime:
    """Return when a tick without a terminal outcome is declared missed.

    Every attempt may use its whole timeout and every retry its whole backoff; a
    finished attempt wakes the poller at once, so no poll interval is added. On top,
    a grace of a quarter of the cadence, between one and fifteen minutes, absorbs a
    slow wake or a busy worker:

        deadline = scheduled_for + (retries + 1) × timeout + Σ backoffs + grace
        grace    = clamp(cadence / 4, 60 s, 900 s)
    """
    return scheduled_for + run_deadline_span(timeout_seconds=timeout_seconds, backoffs=backoffs,
                                             interval_seconds=interval_seconds)


def run_deadline_span(*, timeout_seconds: int, backoffs: tuple[int, ...], interval_seconds: int) -> timedelta:
    """What `run_deadline` adds to a tick: `(retries + 1) × timeout + Σ backoffs + grace`, the one formula.

    A function of the budget alone, so a holder of one budget (`catalog.Budget`) computes it
    once and adds it to every tick it is given.
    """
    total = (len(backoffs) + 1) * timeout_seconds + sum(backoffs) + deadline_grace_seconds(interval_seconds)
    return timedelta(seconds=total)


def deadline_grace_seconds(interval_seconds: int) -> float:
    """The grace every deadline adds for a slow wake or a late report: clamp(cadence / 4, 60 s, 900 s)."""
    return min(max(interval_seconds / 4, 60), 900)


def external_run_deadline(scheduled_for: datetime, *, timeout_seconds: int, interval_seconds: int,
                          started: bool) -> datetime:
    """Return when a tick of an external workflow without a terminal report is declared missed.

    tickwarden never runs or retries an external job, so no retry budget counts: the
    job has the grace to report (its `start`, or its outcome at once), and once it
    reported `start` its run timeout on top, since a started job may run that long:

        not started: scheduled_for + grace
        started:     scheduled_for + grace + timeout   (≥ started_at + timeout: a start comes within the grace)
    """
    total = deadline_grace_seconds(interval_seconds) + (timeout_seconds if started else 0)
    return scheduled_for + timedelta(seconds=total)
