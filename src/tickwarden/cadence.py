"""Cron schedules in their own timezone, and the cadence they imply.

Fire times come from cronsim, evaluated in the schedule's IANA zone so that DST is
handled the way cron users expect: a time skipped by spring-forward fires at the
first valid minute after the gap, and a time repeated by fall-back fires once.
Everything that leaves this module is aware UTC.

The cadence of a schedule is the gap between consecutive fire times. Irregular
expressions (`0 9 * * 1-5`: gaps of one and three days) are summarised by the
*median* gap over the next 64 fire times (or eight years, whichever comes first),
so one long weekend gap does not make a weekday job look weekly, and a DST day's
23- or 25-hour gap does not move a daily job out of its class.

Every component asks for the same fire times: the ticker when it fires a tick,
the deadline detector when it audits it a minute later, the profile when it is
derived. Walking a cron expression costs far more than looking a time up, so the
consecutive fire times of each (expression, zone) are remembered in one chain per
process (`_FireChains`): the fire after any instant the chain covers is a bisection,
and the chain is extended by the same cronsim walk that produced it. A walk
started at any instant between two consecutive fires yields the later one (cronsim
keeps no state beyond the current time), so the chain answers exactly what a
fresh walk would.
"""

from __future__ import annotations

import bisect
import functools
import statistics
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from tickwarden.clock import ensure_utc
from tickwarden.errors import InvalidSchedule

SAMPLE_FIRES = 64
HORIZON = timedelta(days=8 * 366)

# cronsim speaks five-field cron; the common macros are spelled out here.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True)
class CronSchedule:
    """A validated cron expression in an IANA timezone."""

    cron: str
    timezone: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @functools.cached_property
    def expression(self) -> str:
        # Cached: every fire-time lookup keys its chain by the expression.
        return MACROS.get(self.cron.strip().lower(), self.cron.strip())

    def fire_times(self, after: datetime) -> Iterator[datetime]:
        """Yield fire times strictly after `after`, ascending, as aware UTC."""
        current = after if after.tzinfo is UTC else ensure_utc(after)  # UTC already: as ensure_utc returns it
        while True:
            fires = _CHAINS.following(self, current)  # a few at a time: one lookup, not one a fire
            if not fires:
                return
            yield from fires
            current = fires[-1]

    def walk(self, after: datetime) -> Iterator[datetime]:
        """Yield fire times strictly after `after` straight from cronsim, remembering nothing.

        A schedule in UTC is walked in aware UTC itself, not in `ZoneInfo("UTC")`: cronsim
        steps a UTC time by plain addition, where under any other zone it converts to UTC
        and back at every step, and walks a fixed-time expression in naive local time, each
        fire checked against a DST gap. UTC has one offset, zero, and no gap: the same
        instants either way, and what is yielded is aware UTC already.
        """
        after = ensure_utc(after)
        if self.timezone == "UTC":
            yield from CronSim(self.expression, after)
            return
        for fire in CronSim(self.expression, after.astimezone(self.zone)):
            yield fire.astimezone(after.tzinfo)

    def next_after(self, after: datetime) -> datetime | None:
        """Return the first fire time strictly after `after`, or None within the horizon."""
        limit = ensure_utc(after) + HORIZON
        for fire in self.fire_times(after):
            return fire if fire <= limit else None
        return None

    def fires_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Yield fire times in the half-open interval (start, end]."""
        for fire in self.fire_times(start):
            if fire > end:
                return
            yield fire


class _FireChain:
    """Consecutive fire times of one schedule: none in (start, fires[0]), and none between neighbours."""

    __slots__ = ("start", "fires", "walker", "exhausted")

    def __init__(self, schedule: CronSchedule, start: datetime):
        self.start = start
        self.fires: list[datetime] = []
        self.walker = schedule.walk(start)
        self.exhausted = False

    def covers(self, instant: datetime) -> bool:
        return instant >= self.start

    def extend(self) -> bool:
        """Walk one fire further; False when the expression never fires again."""
        if self.exhausted:
            return False
        fire = next(self.walker, None)
        if fire is None:
            self.exhausted = True
            return False
        self.fires.append(fire)
        return True


class _FireChains:
    """One `_FireChain` per (expression, zone), bounded in number and length.

    1. An instant the chain covers, up to its last fire: bisect.
    2. Past its last fire: extend the chain, unless that takes more than
       `MAX_EXTEND` steps (a request far ahead): then start a new chain there.
    3. Before the chain's start: start a new chain there.
    4. A chain longer than `MAX_FIRES` forgets its older half; beyond `MAX_CHAINS`
       schedules, the oldest chain goes.

    A lock makes it safe for the service's loop threads to share. At most about 9 KiB a
    chain (128 fires and a cronsim walker): 18 MB for 2,048 distinct schedules, the
    most a long-running control plane ever holds.
    """

    MAX_CHAINS = 2048
    MAX_FIRES = 128
    MAX_EXTEND = 256
    BATCH = 16  # fires `following` hands out at once: a walk rarely wants more, and a look wants one

    def __init__(self) -> None:
        self._chains: dict[tuple[str, str], _FireChain] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._chains.clear()

    def next_after(self, schedule: CronSchedule, instant: datetime) -> datetime | None:
        """Return the first fire time strictly after `instant`, or None when there is none."""
        key = (schedule.expression, schedule.timezone)
        with self._lock:
            chain = self._chains.get(key)
            if chain is None or not chain.covers(instant):
                chain = self._replace(key, schedule, instant)
            fires = chain.fires
            index = bisect.bisect_right(fires, instant)
            if index < len(fires):
                return fires[index]
            steps = 0
            while chain.extend():
                if fires[-1] > instant:
                    self._trim(chain)
                    return fires[-1]
                steps += 1
                if steps > self.MAX_EXTEND:
                    chain = self._replace(key, schedule, instant)
                    return chain.fires[-1] if chain.extend() else None
            return None

    def following(self, schedule: CronSchedule, instant: datetime) -> list[datetime]:
        """Return the next fire times strictly after `instant`, consecutive: up to `BATCH` the chain holds, or one.

        The fires a chain holds past `instant` are its next ones (none is missing between
        neighbours), so a walk over many of them (a cadence's sample, a ticker's window)
        takes a lookup per batch, not per fire. Empty when the schedule never fires again.
        """
        key = (schedule.expression, schedule.timezone)
        with self._lock:
            chain = self._chains.get(key)
            if chain is not None and instant >= chain.start:  # `covers`, inlined: one call a lookup
                fires = chain.fires
                index = bisect.bisect_right(fires, instant)
                if index < len(fires):
                    return fires[index:index + self.BATCH]
        fire = self.next_after(schedule, instant)
        return [] if fire is None else [fire]

    def _replace(self, key: tuple[str, str], schedule: CronSchedule, start: datetime) -> _FireChain:
        chain = _FireChain(schedule, start)
        self._chains.pop(key, None)
        if len(self._chains) >= self.MAX_CHAINS:
            del self._chains[next(iter(self._chains))]  # the oldest
        self._chains[key] = chain
        return chain

    def _trim(self, chain: _FireChain) -> None:
        if len(chain.fires) > self.MAX_FIRES:
            half = len(chain.fires) // 2
            chain.start = chain.fires[half - 1]
            del chain.fires[:half]


_CHAINS = _FireChains()


@dataclass(frozen=True)
class Cadence:
    """How often a schedule fires: the interval and how it was summarised."""

    interval_seconds: int
    regular: bool
    gaps_sampled: int

    @property
    def summary(self) -> str:
        how = "every gap equal" if self.regular else "median of irregular gaps"
        return f"{_human(self.interval_seconds)} ({how}, {self.gaps_sampled} gaps sampled)"


def parse_schedule(cron: str, timezone: str = "UTC") -> CronSchedule:
    """Validate a cron expression and zone; raise InvalidSchedule with one clear sentence."""
    if not isinstance(cron, str) or not cron.strip():
        raise InvalidSchedule("The cron expression is empty.")
    if not isinstance(timezone, str):
        raise InvalidSchedule(f"Unknown timezone {timezone!r}: use an IANA name such as 'Europe/Berlin'.")
    return _parsed(cron, timezone)


@functools.lru_cache(maxsize=4096)
def _parsed(cron: str, timezone: str) -> CronSchedule:
    """`parse_schedule` of two strings, remembered: a schedule is immutable, and its check builds a cronsim walker.

    A failure is not remembered (lru_cache keeps no exception): it raises again each time.
    """
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidSchedule(f"Unknown timezone {timezone!r}: use an IANA name such as 'Europe/Berlin'.") from None
    schedule = CronSchedule(cron=cron.strip(), timezone=timezone)
    fields = schedule.expression.split()
    if len(fields) != 5:
        raise InvalidSchedule(
            f"Cron expression {cron!r} has {len(fields)} fields; expected 5 (minute hour day month weekday)."
        )
    try:
        CronSim(schedule.expression, datetime(2000, 1, 1, tzinfo=schedule.zone))
    except CronSimError as exc:
        if _never_fires(fields):
            raise InvalidSchedule(f"Cron expression {cron!r} never fires: its day-of-month falls in none of its months.") from None
        raise InvalidSchedule(f"Cron expression {cron!r} is not valid: {_describe(exc)}.") from None
    return schedule


def _never_fires(fields: list[str]) -> bool:
    # cronsim calls "31 2" a bad day-of-month; when the same day is fine in every month,
    # the fields are each valid and the expression only names a date that never exists.
    try:
        CronSim(" ".join([*fields[:3], "*", fields[4]]), datetime(2000, 1, 1))
        CronSim(" ".join([*fields[:2], "*", *fields[3:]]), datetime(2000, 1, 1))
    except CronSimError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def cadence_of(schedule: CronSchedule, now: datetime) -> Cadence:
    """Summarise the interval between consecutive fire times after `now`.

    Cached: a fleet repeats a few expressions, and the walk over a year of fires is long.
    """
    now = ensure_utc(now)
    limit = now + HORIZON
    shifted = _shift(schedule)
    if shifted is not None:
        # The schedule's fires are the shape's shifted by a constant: their gaps are the
        # shape's, so the summary of a stretch of the shape's fires serves every shift
        # that samples the same stretch (`_shape_cadence`).
        shape, shift, bound = shifted
        anchor = now - bound
        shape_fires = _shape_fires(shape, anchor, bound)
        # the schedule's fires are the shape's with fire + shift > now; the sample takes
        # them while fire + shift <= limit, at most SAMPLE_FIRES + 1 of them
        start = bisect.bisect_right(shape_fires, now - shift)
        end = min(start + SAMPLE_FIRES + 1, bisect.bisect_right(shape_fires, limit - shift))
        if end - start < 2:
            _no_cadence(schedule)
        return _shape_cadence(shape, anchor, bound, start, end)
    fires: list[datetime] = []
    for fire in schedule.fire_times(now):
        if fire > limit or len(fires) > SAMPLE_FIRES:
            break
        fires.append(fire)
    if len(fires) < 2:
        _no_cadence(schedule)
    return _summarised(fires)


def _no_cadence(schedule: CronSchedule) -> None:
    raise InvalidSchedule(
        f"Cron expression {schedule.cron!r} does not fire at least twice in eight years, so it has no cadence."
    )


def _summarised(fires: Sequence[datetime]) -> Cadence:
    """The cadence of consecutive fire times (two or more): the median gap, and whether the gaps agree."""
    gaps = [(b - a).total_seconds() for a, b in zip(fires, fires[1:], strict=False)]
    interval = int(statistics.median(gaps))
    # A DST transition stretches or shrinks one gap by an hour; that is not irregularity.
    regular = all(abs(gap - interval) <= 3600 and gap > 0 for gap in gaps) and (
        interval > 2 * 3600 or all(gap == interval for gap in gaps)
    )
    return Cadence(interval_seconds=max(interval, 1), regular=regular, gaps_sampled=len(gaps))


@functools.lru_cache(maxsize=1024)
def _shape_cadence(shape: CronSchedule, anchor: datetime, bound: timedelta, start: int, end: int) -> Cadence:
    """`_summarised` of the shape's fires [start:end] after `anchor` (`_shape_fires`): a shift moves no gap."""
    return _summarised(_shape_fires(shape, anchor, bound)[start:end])


def _shift(schedule: CronSchedule) -> tuple[CronSchedule, timedelta, timedelta] | None:
    """The same schedule at the top of the hour (or of the day), and the shift back to it, when that is exact.

    In UTC, which has no offset changes, `m H D M W` with one minute `m` fires exactly
    `m` minutes after each fire of `0 H D M W` (the shift keeps the hour and the day), and
    `m h D M W` with one hour `h` as well fires `h:m` after each fire of `0 0 D M W`. A
    fleet writes a handful of such shapes with many different minutes and hours, so the
    cadence walks the shape once instead of every expression. Returns (shape, shift, the
    bound of any shift of that kind), or None where another zone or field makes it inexact.
    """
    if schedule.timezone != "UTC":
        return None
    minute, hour, *days = schedule.expression.split()
    if not minute.isdigit():
        return None
    if hour.isdigit():
        shape = CronSchedule(" ".join(["0", "0", *days]), "UTC")
        return shape, timedelta(hours=int(hour), minutes=int(minute)), timedelta(days=1)
    return CronSchedule(" ".join(["0", hour, *days]), "UTC"), timedelta(minutes=int(minute)), timedelta(hours=1)


@functools.lru_cache(maxsize=256)
def _shape_fires(shape: CronSchedule, anchor: datetime, bound: timedelta) -> tuple[datetime, ...]:
    """Enough fire times of `shape` after `anchor` for `cadence_of` of any of its shifts by less than `bound`.

    A shape fires at most once in any interval of `bound` (its fires fall on the hour, or
    at midnight), so at most one of them before a shifted schedule's first fire after
    `anchor + bound` is passed over: one more than the sample, and none past the latest
    horizon any shift reaches.
    """
    fires: list[datetime] = []
    limit = anchor + bound + HORIZON
    for fire in shape.walk(anchor):
        fires.append(fire)
        if fire > limit or len(fires) > SAMPLE_FIRES + 1:
            break
    return tuple(fires)


def _describe(exc: CronSimError) -> str:
    text = str(exc).strip().rstrip(".") or "unparseable"
    return text[0].lower() + text[1:]


def _human(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds} s"
