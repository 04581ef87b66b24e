"""The ticker: turn due schedules into runs, one run per tick across any number of replicas.

The schedule is the trigger: every write of a schedule (publish, apply, pause,
resume) sets its `next_fire_at` (its `schedule_fires` row) in its own transaction, so
a published schedule is fired by the next pass, whoever published it and whether or
not a wake-up arrived. One pass at `now`, in one transaction:

1. Lock up to `batch` due fire rows (`next_fire_at <= now`, earliest first, through
   the partial index) with `FOR UPDATE SKIP LOCKED`: concurrent tickers take
   disjoint schedules and never wait for each other, nor for a publish in flight.
   They come back grouped by everything a tick is made of (expression, zone, next
   fire time, starting deadline, profile inputs): a fleet due at one minute is a few
   groups, and the work below is per group, not per schedule.
2. For each group, list its fire times from `next_fire_at` up to `now`. A tick
   older than the schedule's `starting_deadline_seconds` when first seen is not
   run late: it is skipped (the deadline detector records it `missed`), and
   scheduling continues with the ticks inside the deadline and then the next
   future tick. Never a burst of stale runs, never a schedule that stops.
3. Skip ticks that `suppressed(workflow_id, tick)` rejects (a simulated trigger
   outage): they are treated exactly like ticks the trigger never saw. Only then
   are a group's members read one by one, and only when one of them is among the
   workflows `suppressing(first, last)` says may have a tick between the group's
   first and last rejected.
4. Insert one run per remaining tick and move every claimed schedule to its first
   fire time after `now`, in one statement (`submit_tick_groups`), each run with its
   retry budget and backoffs (the profile's when monitoring is on, else none) and its
   deadline (`profile.run_deadline`). The locked fire rows make this pass the only
   writer of their ticks (another replica skips them, and sees them moved on once this
   one commits), so the runs go in with a plain insert; the unique index on (workflow,
   tick) stays the last line of defence. A tick that already has its run (recorded by
   another trigger, or made due again by a publish whose clock was behind) fails the
   insert, and the pass, rolled back whole, is fired again with `ON CONFLICT DO
   NOTHING`, which an external workflow's ticks always get (a check-in may record
   its tick before the ticker does). The plain insert makes every run it is given or
   none, so its count is not read back (`send_tick_groups`): it created what the pass
   fired, and its error is raised by the commit, at the pipeline's sync. A pass with
   something due is then two round trips: BEGIN with the claim, and the insert with
   COMMIT. On the simulator's kept pipeline (`DedicatedDatabase`) the commit is not
   waited for either: an error there would be raised by the next statement read,
   which ends the simulation, as for every write sent ahead. No such error can arise
   there: a managed workflow's tick gets a run from the ticker alone (the deadline
   detector records a tick missed only past its starting deadline, which the ticker
   never fires, and check-ins are an external workflow's, fired tolerant).

The next wake-up is the earliest `next_fire_at` of all schedules once the pass is done:
the earliest of the schedules the claim did not take (read by the claim itself, in its
snapshot: one written after it wakes the ticker, as a write after the pass does) and of
the fire times the pass wrote; no read after the writes. But no later than `max_sleep`
ahead (so schedules written by another replica are noticed even without a wake-up
notification); immediately when the batch was full and schedules are still due.

A pass that expects nothing due (its last pass read a later earliest fire time) first
looks at the earliest fire time on its own (`Database.probe`: one statement, no
transaction, no lock), and when nothing is due that look is the whole pass: one round
trip. A pass with something due opens the claim's transaction, which is pipelined
(`Database.transaction(pipelined=True)`): its BEGIN goes out with the claim and its
COMMIT with the pipeline's end. The look and the claim read different
snapshots, which changes nothing: a schedule that becomes due after the look is fired by
the pass its write wakes (or by the next one, at most `max_sleep` later), exactly as one
written after the claim's snapshot always was.

Fire times are computed per distinct (cron, zone, window) and shared by every
group with the same key; the members' ids cross the client as array text, never as
one Python object per schedule, and the statement returns a count, not the runs.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from psycopg.errors import UniqueViolation

from tickwarden.cadence import CronSchedule
from tickwarden.catalog import budget_for
from tickwarden.db import Database
from tickwarden.store.ledger import TickGroup
from tickwarden.store.trigger import Advance, DueGroup, int_array_literal, parse_int_array

log = logging.getLogger(__name__)

Suppressed = Callable[[int, datetime], bool]
# The workflows of which `Suppressed` may reject a tick in [first, last] (None: any workflow).
Suppressing = Callable[[datetime, datetime], Collection[int] | None]
Ticks = tuple[tuple[datetime, datetime], ...]   # (scheduled_for, deadline_at), oldest first
ONE_MICROSECOND = timedelta(microseconds=1)
# When the earliest schedule is due but not ours to fire (locked by another replica or
# by a publish in flight), look again shortly instead of spinning.
RETRY_SOON = timedelta(seconds=1)


@dataclass(frozen=True)
class FireWindow:
    """The fire times of one (cron, zone) due at `now`: those to run, and the next one after `now`."""

    fire: tuple[datetime, ...]
    stale: int
    next_fire_at: datetime | None


@dataclass(frozen=True)
class PassStats:
    """What the last pass did and where its time went (for logs and the benchmark)."""

    claimed: int
    fired: int
    created: int
    claim_ms: float
    insert_ms: float  # until the insert's result is in: for an exclusive pass, which does not read it, the commit's
    advance_ms: float  # the commit after a read insert (none of its own for an exclusive pass)
    # The earliest pending fire time of an active schedule once the pass's writes were
    # made (None: no active schedule): what a look at the schedules would read until
    # another writer moves one (the simulator skips idle passes on it).
    earliest: datetime | None = None


class Ticker:
    name = "ticker"

    def __init__(
        self,
        db: Database,
        *,
        suppressed: Suppressed | None = None,
        suppressing: Suppressing | None = None,
        batch: int = 20000,
        max_sleep: timedelta = timedelta(seconds=60),
    ):
        self.db = db
        self.suppressed = suppressed
        self.suppressing = suppressing
        self.batch = batch
        self.max_sleep = max_sleep
        self.fired = 0
        self.created = 0
        self.stale = 0
        self.last_pass: PassStats | None = None

    def run_once(self, now: datetime) -> datetime:
        """Fire every due tick of up to one batch of schedules at `now`; return the next wake-up."""
        t0 = time.perf_counter()
        if self._expects_nothing_due(now):
            with self.db.probe() as look:
                earliest = look.trigger.earliest_fire()
            if earliest is None or earliest > now:  # an idle pass: nothing to claim
                self.last_pass = PassStats(0, 0, 0, (time.perf_counter() - t0) * 1000, 0.0, 0.0, earliest)
                return now + self.max_sleep if earliest is None else min(earliest, now + self.max_sleep)
        try:
            earliest, claimed, created = self._claim_and_fire(now, t0, exclusive=True)
        except UniqueViolation:
            # A claimed tick already had its run (recorded by another trigger, or fired before
            # a publish whose clock was behind this one's set it due again): the pass was
            # rolled back whole, and is fired again passing over such runs.
            log.warning("ticker: a due tick already had its run at %s; firing the pass again", now.isoformat())
            earliest, claimed, created = self._claim_and_fire(now, time.perf_counter(), exclusive=False)
        if created:
            log.info("ticker: %d run(s) created for %d due schedule(s)", created, claimed)
        if earliest is None:
            return now + self.max_sleep
        if earliest <= now:
            # Still due after this pass's writes: more than a batch (ours to take now), or
            # held by another replica or a publish in flight (look again shortly).
            return now if claimed >= self.batch else now + RETRY_SOON
        # Nothing is due any more, even after a full batch: a pass now would find nothing.
        return min(earliest, now + self.max_sleep)

    def _claim_and_fire(self, now: datetime, t0: float, *, exclusive: bool) -> tuple[datetime | None, int, int]:
        """Claim, fire and advance up to one batch in one transaction; return the earliest fire time, claimed and created.

        `exclusive`: insert the runs plainly, as the only writer of their ticks, unless a
        claimed workflow is external (a check-in may record its tick first). The counters
        move only once the transaction has committed, so a pass fired again counts once.
        """
        windows: dict[tuple[str, str, datetime, int], FireWindow] = {}
        with self.db.transaction(pipelined=True) as store:  # BEGIN rides with the claim, COMMIT with the end
            due, earliest = store.trigger.claim_due_and_earliest(now, self.batch)
            groups: list[TickGroup] = []
            advances: list[Advance] = []
            claimed = fired = stale = 0
            for entry in due:
                window = self._window(windows, entry, now)
                claimed += entry.members
                stale += window.stale * entry.members
                if not window.fire:
                    advances.append(Advance(entry.schedule_ids, window.next_fire_at, None))
                    continue
                # An external workflow's tick cannot be retried by tickwarden: no retry budget,
                # and its deadline is what its job can do (checkins.py, profile.external_run_deadline).
                external = entry.kind == "external"
                exclusive = exclusive and not external
                budget = budget_for(entry.cadence_seconds, entry.policy_overrides,
                                    entry.monitoring_enabled and not external, entry.timeout_seconds)
                ticks = tuple((tick, budget.external_deadline(tick) if external else budget.deadline(tick))
                              for tick in window.fire)
                for members, kept in self._split(entry, ticks):
                    if kept:
                        groups.append(TickGroup(members.workflow_ids, members.tenant_ids, kept, budget.retries,
                                                budget.backoffs, 0 if external else 1))
                        fired += len(kept) * members.count
                    advances.append(Advance(members.schedule_ids, window.next_fire_at,
                                            kept[-1][0] if kept else None))
            t1 = time.perf_counter()
            if exclusive:
                # The plain insert makes every run it is given or fails whole: it created what the
                # pass fired, and its error, if any, is raised by the commit below, not a read.
                store.ledger.send_tick_groups(groups, now, advances)
                created = fired
            else:
                created = store.ledger.submit_tick_groups(groups, now, advances)()
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        if exclusive:  # the insert's result came with the commit
            t2 = t3
        # Once the pass is done the earliest fire time is that of a schedule the claim did not
        # take (`earliest`, read by the claim) or one this pass just wrote: no read after the writes.
        earliest = min([t for t in (earliest, *(a.next_fire_at for a in advances)) if t is not None], default=None)
        self.stale += stale
        self.fired += fired
        self.created += created
        self.last_pass = PassStats(claimed, fired, created, (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000,
                                   earliest)
        return earliest, claimed, created

    def _expects_nothing_due(self, now: datetime) -> bool:
        """Whether this ticker's last pass left nothing due by `now`: then a look comes before any claim.

        A pass woken by its own timer at the earliest fire time it last read (or a first
        pass, which knows nothing) expects work and claims at once, its claim reading the
        earliest fire time of what it does not take: a look first would only cost it a round trip. A pass
        woken earlier (a poll, a wake-up after another replica's write) is usually idle,
        and its look is the whole pass. Either way what decides is what the database says
        at the pass, never this expectation: it only chooses which read goes first.
        """
        last = self.last_pass
        return last is not None and (last.earliest is None or last.earliest > now)

    def _window(self, cache: dict[tuple[str, str, datetime, int], FireWindow], entry: DueGroup, now: datetime) -> FireWindow:
        key = (entry.cron, entry.timezone, entry.next_fire_at, entry.starting_deadline_seconds)
        window = cache.get(key)
        if window is None:
            # Ticks before `now - deadline` are stale when first seen: start listing after them.
            oldest_allowed = now - timedelta(seconds=entry.starting_deadline_seconds)
            window = compute_window(_schedule(entry.cron, entry.timezone), entry.next_fire_at, oldest_allowed, now)
            cache[key] = window
        return window

    def _split(self, entry: DueGroup, ticks: Ticks) -> list[tuple[Members, Ticks]]:
        """Return the group's members with the ticks each fires: all of them, unless `suppressed` rejects some.

        Members whose ticks `suppressed` thins alike stay together; only then are their ids read.
        Not at all when `suppressing` names none of them for the window: the simulator's trigger
        outages touch a few hours of a few workflows, and most groups have none of those.
        """
        members = Members(entry.schedule_ids, entry.workflow_ids, entry.tenant_ids, entry.members)
        if self.suppressed is None:
            return [(members, ticks)]
        if self.suppressing is not None:
            exposed = self.suppressing(ticks[0][0], ticks[-1][0])
            if exposed is not None and (not exposed or set(exposed).isdisjoint(parse_int_array(entry.workflow_ids))):
                return [(members, ticks)]
        suppressed = self.suppressed
        by_kept: dict[Ticks, list[tuple[int, int, int]]] = {}
        ids = zip(parse_int_array(entry.schedule_ids), parse_int_array(entry.workflow_ids),
                  parse_int_array(entry.tenant_ids), strict=True)
        for schedule_id, workflow_id, tenant_id in ids:
            kept = tuple(t for t in ticks if not suppressed(workflow_id, t[0]))
            by_kept.setdefault(kept, []).append((schedule_id, workflow_id, tenant_id))
        return [(Members(int_array_literal([m[0] for m in alike]), int_array_literal([m[1] for m in alike]),
                         int_array_literal([m[2] for m in alike]), len(alike)), kept)
                for kept, alike in by_kept.items()]


@dataclass(frozen=True)
class Members:
    """Some members of a claimed group: their ids as PostgreSQL array text, index for index."""

    schedule_ids: str
    workflow_ids: str
    tenant_ids: str
    count: int


@functools.lru_cache(maxsize=8192)
def _schedule(cron: str, timezone: str) -> CronSchedule:
    """One `CronSchedule` per claimed expression and zone, kept across passes.

    A schedule is a value (frozen), so sharing one changes no fire time; a shared one works
    out its expression once (`CronSchedule.expression`, cached on the instance), where a fresh
    one at every window did it again: 4,650 windows a simulated day of 1,000 workflows.
    """
    return CronSchedule(cron, timezone)


def compute_window(schedule: CronSchedule, next_fire_at: datetime, oldest_allowed: datetime, now: datetime) -> FireWindow:
    """Return the ticks in [next_fire_at, now] to run (none older than `oldest_allowed`) and the next one.

    Stale ticks are counted only when few (they are skipped without being listed
    when an entry was asleep for long: a day-long outage of an every-minute schedule
    costs one cron evaluation, not 1,440).
    """
    start = max(next_fire_at, oldest_allowed)
    stale = 0
    if next_fire_at < oldest_allowed:
        for _ in schedule.fires_between(next_fire_at - ONE_MICROSECOND, oldest_allowed - ONE_MICROSECOND):
            stale += 1
            if stale >= 1000:
                break
    fire: list[datetime] = []
    following = None
    for tick in schedule.fire_times(start - ONE_MICROSECOND):
        if tick > now:
            following = tick
            break
        fire.append(tick)
    return FireWindow(fire=tuple(fire), stale=stale, next_fire_at=following)
