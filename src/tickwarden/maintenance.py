"""Maintenance windows: when a workflow's owners are working on it, nothing is delivered.

A window covers one workflow, or every workflow of a tenant, and is either

* one-off: the half-open span [start, end), or
* recurring: every fire time `o` of a cron expression in an IANA zone opens the
  span [o, o + duration). Fire times are cronsim's, through `cadence.parse_schedule`,
  so DST behaves as it does for schedules: a start skipped by spring-forward opens at
  the first valid minute after the gap, a start repeated by fall-back opens once. The
  duration is elapsed time, so a window across a DST change lasts exactly that long.

Everything here is pure (time is an argument); the database side lives in
`store/maintenance.sql` and the effect on deliveries and escalation in `holds.py`.
Adding, removing and replacing windows goes through the functions at the bottom,
the one write path the CLI, the API, the dashboard, `apply` and the simulator share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from tickwarden.cadence import parse_schedule
from tickwarden.clock import ensure_utc
from tickwarden.errors import Conflict, InvalidInput, NotFound, TickwardenError
from tickwarden.models import Window, WindowSpec
from tickwarden.sanitize import sanitize_error

if TYPE_CHECKING:
    from tickwarden.store import Store

MAX_DURATION = timedelta(days=7)          # one occurrence of a recurring window
MAX_ONE_OFF = timedelta(days=31)          # a one-off window; longer is a pause, not maintenance
MIN_DURATION = timedelta(minutes=1)
MAX_NOTE = 500
MAX_WINDOWS_PER_WORKFLOW = 20             # a file's list; bounds every coverage computation
# Chained windows (one starting where another ends) are merged up to this many links;
# a set of windows covering all time would otherwise never end.
MAX_CHAIN = 64
# Escalation time is measured outside windows up to this far ahead; past it, windows
# are ignored so that a pathological set (one covering all time) cannot hold an alert forever.
ESCALATION_HORIZON = timedelta(days=62)


def covering_span(windows: Iterable[Window], instant: datetime) -> tuple[datetime, datetime] | None:
    """Return the maximal span of maintenance containing `instant`, merging chained windows.

    The end is where no window covers any more: a window that starts exactly where
    (or before) another ends extends the span, up to MAX_CHAIN links.
    """
    windows = list(windows)
    spans = [s for s in (w.span_at(instant) for w in windows) if s is not None]
    if not spans:
        return None
    start = min(s for s, _ in spans)
    end = max(e for _, e in spans)
    for _ in range(MAX_CHAIN):
        more = [s for s in (w.span_at(end) for w in windows) if s is not None]
        if not more:
            break
        end = max(e for _, e in more)
    return start, end


def covered_until(windows: Iterable[Window], instant: datetime) -> datetime | None:
    """Return when the maintenance covering `instant` ends, or None when none covers it."""
    span = covering_span(windows, instant)
    return span[1] if span else None


def deadline_outside(windows: Sequence[Window], start: datetime, budget: timedelta) -> datetime:
    """Return the instant at which `budget` of time outside every window has passed since `start`.

    1. From `start`, if a window covers the current instant, jump to the end of its span.
    2. Otherwise the clock runs until the next window starts (or the budget is spent).
    3. Repeat; past ESCALATION_HORIZON the windows are ignored.
    """
    now = ensure_utc(start)
    left = budget
    limit = now + ESCALATION_HORIZON
    while now < limit:
        span = covering_span(windows, now)
        if span is not None:
            now = span[1]
            continue
        starts = [s for s in (w.next_start(now) for w in windows) if s is not None]
        upcoming = min(starts, default=None)
        if upcoming is None or upcoming - now >= left:
            return now + left
        left -= upcoming - now
        now = upcoming
    return now + left


# -- validation ------------------------------------------------------------------------------------


def window_spec(*, start: datetime | str | None = None, end: datetime | str | None = None,
                cron: str | None = None, duration: str | int | None = None, timezone: str | None = None,
                note: str | None = None, where: str = "maintenance window") -> WindowSpec:
    """Check a window as given by a person or a file; raise InvalidInput with one sentence."""
    one_off = start is not None or end is not None
    recurring = cron is not None or duration is not None
    if one_off and recurring:
        raise InvalidInput(f"The {where} is either one-off (start and end) or recurring (cron and duration), "
                           "not both.")
    clean_note = sanitize_error(note, limit=MAX_NOTE).strip() or None if note else None
    if one_off:
        if timezone is not None:
            raise InvalidInput(f"The {where}'s timezone applies to a recurring window only; give start and end "
                               "with their UTC offset.")
        if start is None or end is None:
            raise InvalidInput(f"The {where} needs both a start and an end.")
        starts_at, ends_at = _instant(start, "start", where), _instant(end, "end", where)
        if ends_at <= starts_at:
            raise InvalidInput(f"The {where}'s end must be after its start.")
        if ends_at - starts_at > MAX_ONE_OFF:
            raise InvalidInput(f"The {where} lasts more than {MAX_ONE_OFF.days} days; pause the workflow instead.")
        return WindowSpec(starts_at=starts_at, ends_at=ends_at, note=clean_note)
    if cron is None or duration is None:
        raise InvalidInput(f"The {where} needs a start and an end, or a cron expression and a duration.")
    try:
        schedule = parse_schedule(cron, timezone or "UTC")
    except TickwardenError as exc:
        raise InvalidInput(f"The {where}'s cron: {exc.message}") from None
    seconds = parse_duration(duration, where)
    return WindowSpec(cron=schedule.cron.strip(), timezone=schedule.timezone, duration_seconds=seconds,
                      note=clean_note)


def parse_duration(value: str | int, where: str = "maintenance window") -> int:
    """Read a duration such as 90, '90s', '45m', '2h', '1d' or '1h30m'; return seconds."""
    import re

    if isinstance(value, bool):
        raise InvalidInput(f"The {where}'s duration must be a length of time such as 30m or 2h.")
    if isinstance(value, int):
        seconds = value
    else:
        text = str(value).strip().lower()
        parts = re.fullmatch(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?", text)
        if not text or parts is None or not any(parts.groups()):
            raise InvalidInput(f"The {where}'s duration {str(value)[:40]!r} is not a length of time such as "
                               "30m or 2h.")
        d, h, m, s = (int(g) if g else 0 for g in parts.groups())
        if max(d, h, m, s) > 10**6:
            raise InvalidInput(f"The {where}'s duration is too long: at most {MAX_DURATION.days} days.")
        seconds = d * 86400 + h * 3600 + m * 60 + s
    if seconds < MIN_DURATION.total_seconds():
        raise InvalidInput(f"The {where}'s duration must be at least one minute.")
    if seconds > MAX_DURATION.total_seconds():
        raise InvalidInput(f"The {where}'s duration is too long: at most {MAX_DURATION.days} days.")
    return seconds


def _instant(value: datetime | str, name: str, where: str) -> datetime:
    if isinstance(value, str):
        text = value.strip()
        try:
            value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise InvalidInput(f"The {where}'s {name} {text[:40]!r} is not a time such as "
                               "2026-12-01T01:00:00Z.") from None
    if value.tzinfo is None:
        raise InvalidInput(f"The {where}'s {name} must carry a UTC offset, e.g. 2026-12-01T01:00:00Z.")
    return ensure_utc(value)




# -- the one write path ----------------------------------------------------------------------------


def add_window(store: Store, tenant: str, workflow: str | None, spec: WindowSpec, actor: str,
               now: datetime) -> Window:
    """Store a window for a tenant, or one of its workflows, on behalf of `actor` (caller's transaction).

    The caller's transaction carries its row-security context: a tenant's token sees,
    and so can attach a window to, its own tenant only.
    """
    tenant_row = store.catalog.get_tenant_by_name(tenant)
    if tenant_row is None:
        raise NotFound(f"There is no tenant {tenant!r}.")
    workflow_id = None
    if workflow is not None:
        found = store.catalog.get_workflow_by_name(tenant, workflow)
        if found is None:
            raise NotFound(f"There is no workflow {tenant}/{workflow}.")
        workflow_id = found.id
    return store.maintenance.insert(tenant_row.id, workflow_id, "api", spec,
                                    sanitize_error(actor or "tickwarden", limit=254), now)


def remove_window(store: Store, window_id: int, tenant: str | None = None) -> Window:
    """Delete a window made through the API or CLI; `tenant`, when given, must own it."""
    window = store.maintenance.get(window_id)
    if window is None or (tenant is not None and window.tenant != tenant):
        raise NotFound(f"There is no maintenance window {window_id}.")
    if window.source == "file":
        raise Conflict(f"Maintenance window {window_id} comes from {window.tenant}/{window.workflow}'s "
                       "workflow file; remove it there and apply the file.")
    store.maintenance.delete(window_id)
    return window


def list_windows(store: Store, tenant: str | None = None) -> list[Window]:
    """Every window visible to the caller's transaction, or one tenant's, oldest first."""
    return store.maintenance.windows(tenant)


def replace_file_windows(store: Store, tenant_id: int, workflow_id: int, specs: Sequence[WindowSpec],
                         now: datetime) -> bool:
    """Make a workflow's file-defined windows exactly `specs` (caller's transaction); return whether they changed.

    Windows added through the API or CLI are the operators' and are left alone.
    """
    current = [w for w in store.maintenance.for_workflows([workflow_id]).get(workflow_id, [])
               if w.source == "file" and w.workflow_id == workflow_id]
    if [_spec_of(w) for w in current] == list(specs):
        return False
    store.maintenance.delete_file_windows(workflow_id)
    for spec in specs:
        store.maintenance.insert(tenant_id, workflow_id, "file", spec, "apply", now)
    return True


def _spec_of(window: Window) -> WindowSpec:
    return WindowSpec(starts_at=window.starts_at, ends_at=window.ends_at, cron=window.cron, timezone=window.timezone,
                      duration_seconds=window.duration_seconds, note=window.note)


def active_windows(windows: Iterable[Window], instant: datetime) -> list[tuple[Window, datetime]]:
    """The windows covering `instant`, each with the end of the maintenance it is part of."""
    windows = list(windows)
    found = []
    for window in windows:
        if window.span_at(instant) is not None:
            relevant = [w for w in windows if w.tenant_id == window.tenant_id
                        and (w.workflow_id is None or w.workflow_id == window.workflow_id)]
            end = covered_until(relevant, instant)
            assert end is not None
            found.append((window, end))
    return found


def entry_of(window: Window) -> dict[str, Any]:
    """A stored window as a workflow entry lists it (what `window_spec` takes back)."""
    if window.recurring:
        entry: dict[str, Any] = {"cron": window.cron, "duration": window.duration_seconds, "timezone": window.timezone}
    else:
        entry = {"start": window.starts_at, "end": window.ends_at}
    if window.note:
        entry["note"] = window.note
    return entry
