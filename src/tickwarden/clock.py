"""The only place that reads the wall clock.

Every component receives a `Clock` (or a `now` captured from one). The service runs
on `WallClock`; the simulator and the tests drive the very same code on a
`VirtualClock`. Datetimes are always timezone-aware UTC.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Return the current time as an aware UTC datetime."""

    def sleep_until(self, when: datetime, wake: threading.Event | None = None) -> None:
        """Block until `when` (or until `wake` is set)."""


class WallClock:
    """Real time."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep_until(self, when: datetime, wake: threading.Event | None = None) -> None:
        delay = (when - self.now()).total_seconds()
        if delay <= 0:
            return
        if wake is None:
            time.sleep(delay)
        else:
            wake.wait(delay)


class VirtualClock:
    """Time that moves only when told to; sleeping jumps straight to the deadline."""

    def __init__(self, start: datetime):
        self._now = ensure_utc(start)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, when: datetime) -> None:
        when = ensure_utc(when)
        with self._lock:
            if when < self._now:
                raise ValueError("a virtual clock never moves backwards")
            self._now = when

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def sleep_until(self, when: datetime, wake: threading.Event | None = None) -> None:
        when = ensure_utc(when)
        with self._lock:
            if when > self._now:
                self._now = when


def ensure_utc(value: datetime) -> datetime:
    """Return `value` as an aware UTC datetime; naive values are rejected."""
    if value.tzinfo is None:
        raise ValueError("naive datetime: every time in tickwarden carries a timezone")
    return value.astimezone(UTC)


def isoformat_z(value: datetime | None) -> str | None:
    """Format an aware datetime as UTC ISO 8601 with a trailing Z."""
    if value is None:
        return None
    value = ensure_utc(value)
    text = value.isoformat(timespec="microseconds" if value.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def parse_utc(text: str) -> datetime:
    """Parse an ISO 8601 timestamp with an explicit offset or Z into aware UTC."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return ensure_utc(value)
