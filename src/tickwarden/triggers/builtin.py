"""The built-in trigger backend: one `trigger_entries` row per active schedule.

An entry holds the schedule's cron and zone at one schedule version and the next
fire time; the `Ticker` fires due entries. When the reconciler writes an entry for
a new or edited schedule, the next fire time is the first fire strictly after the
schedule's last edit (`schedules.updated_at`, written by the application's clock):

- a new or resumed schedule fires from its next tick after it was published or
  resumed, never for ticks that passed while it was paused (no burst);
- an edit that the reconciler sees a little late loses no tick: ticks between the
  edit and the reconciler's pass are still fired by the ticker, within the
  schedule's starting deadline;
- re-firing a tick that an older entry already fired is harmless: runs are unique
  per (workflow, tick).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from tickwarden.cadence import CronSchedule
from tickwarden.store.trigger import DesiredTrigger
from tickwarden.triggers import Drift

if TYPE_CHECKING:
    from tickwarden.store import Store


class BuiltinTriggerBackend:
    name = "builtin"
    needs_ticker = True

    def drift(self, store: Store, now: datetime, limit: int) -> Drift:
        return Drift(upserts=store.trigger_drift_upserts(limit), deletes=store.trigger_drift_deletes(limit))

    def upsert(self, store: Store, triggers: Sequence[DesiredTrigger], now: datetime) -> int:
        cache: dict[tuple[str, str, datetime], datetime | None] = {}
        entries = []
        for trigger in triggers:
            key = (trigger.cron, trigger.timezone, trigger.updated_at)
            if key not in cache:
                cache[key] = CronSchedule(trigger.cron, trigger.timezone).next_after(trigger.updated_at)
            entries.append((trigger, cache[key]))
        return len(store.trigger_upsert_entries(entries, now))

    def delete(self, store: Store, schedule_ids: Sequence[int], now: datetime) -> int:
        return len(store.trigger_delete_entries(schedule_ids))
