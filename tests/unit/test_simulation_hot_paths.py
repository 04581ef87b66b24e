"""The simulator's per-event shortcuts give what the long way gave: events, outcomes, schedules, graces."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

from tickwarden import deadlines, ticker
from tickwarden.cadence import parse_schedule
from tickwarden.models import AttemptOutcome
from tickwarden.simulate.engine import SIMULATED_ROWS, EventQueue, FaultWindowModel, _Event
from tickwarden.simulate.scenario import parse_scenario
from tickwarden.store.monitoring import TickAudit

START = datetime(2026, 11, 30, 1, 55, tzinfo=UTC)


def scenario(**changes):
    raw = {
        "name": "n", "start": "2026-11-30T01:55:00Z", "end": "2026-11-30T09:30:00Z", "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": "nightly", "cron": "0 2 * * *", "duration": 200},
                      {"tenant": "acme", "name": "loads", "cron": "0 3 * * *", "duration": 30, "expect_rows": True}],
    }
    raw.update(changes)
    return parse_scenario(raw)


def test_queued_events_are_the_named_tuples_the_constructor_makes_in_time_order():
    queue = EventQueue()
    later, sooner, superseded, kept = (lambda at: None for _ in range(4))
    queue.at(START + timedelta(seconds=2), 0, later)
    queue.wake("poller", START + timedelta(seconds=1), superseded)
    queue.wake("poller", START + timedelta(seconds=3), kept)
    queue.at(START + timedelta(seconds=1), 0, sooner)
    popped = list(iter(queue.pop, None))
    assert popped == [_Event(START + timedelta(seconds=1), 0, 3, sooner),
                      _Event(START + timedelta(seconds=2), 0, 0, later),
                      _Event(START + timedelta(seconds=3), 5, 2, kept, ("poller", 2))]
    assert all(type(event) is _Event for event in popped)
    assert popped[0].token is None and popped[2].action is kept


def test_usual_attempts_of_a_workflow_share_one_outcome_equal_to_a_fresh_one():
    model = FaultWindowModel(scenario(), {"acme/nightly": 600, "acme/loads": 600})
    first = model.plan("acme/nightly", None, START, START)  # type: ignore[arg-type]
    second = model.plan("acme/nightly", None, START, START + timedelta(days=1))  # type: ignore[arg-type]
    loads = model.plan("acme/loads", None, START, START)  # type: ignore[arg-type]
    assert first.outcome is second.outcome and first.outcome == AttemptOutcome(status="succeeded")
    assert second.at == START + timedelta(days=1, seconds=200)
    assert loads.outcome == AttemptOutcome(status="succeeded", rows=SIMULATED_ROWS)


def test_a_usual_attempt_of_a_workflow_with_faults_outside_it_shares_the_outcome_too():
    model = FaultWindowModel(scenario(faults=[{"workflow": "acme/nightly", "start": "2026-11-30T05:00:00Z",
                                               "end": "2026-11-30T05:10:00Z"}]), {"acme/nightly": 600, "acme/loads": 600})
    clear = model.plan("acme/nightly", None, START, START)  # type: ignore[arg-type]
    hit = model.plan("acme/nightly", None, START, datetime(2026, 11, 30, 4, 59, tzinfo=UTC))  # type: ignore[arg-type]
    assert clear.outcome is model.plan("acme/nightly", None, START, START).outcome  # type: ignore[arg-type]
    assert hit.outcome is not None and hit.outcome.status == "failed"


def test_the_ticker_shares_one_schedule_per_expression_and_zone():
    assert ticker._schedule("*/5 * * * *", "UTC") is ticker._schedule("*/5 * * * *", "UTC")
    assert ticker._schedule("*/5 * * * *", "Europe/Berlin") == parse_schedule("*/5 * * * *", "Europe/Berlin")


def test_an_audit_grace_is_the_same_worked_out_once():
    managed = TickAudit(1, START, 1, 1, "* * * * *", "UTC", "active", 30, False)
    late = TickAudit(2, START, 1, 2, "* * * * *", "UTC", "active", 300, False)
    external = TickAudit(3, START, 1, 3, "0 * * * *", "UTC", "active", 300, False, kind="external", cadence_seconds=3600)
    assert deadlines._audit_grace(managed) == timedelta(seconds=deadlines.MIN_GRACE_SECONDS)
    assert deadlines._audit_grace(late) == timedelta(seconds=300)
    assert deadlines._audit_grace(external) == timedelta(seconds=900)  # a quarter of the hour
    assert deadlines._grace("managed", 0, 300) is deadlines._grace("managed", 0, 300)


def test_fire_times_after_an_instant_in_another_offset_are_the_utc_ones():
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    after = datetime(2027, 3, 27, 3, 0, tzinfo=timezone(timedelta(hours=2)))
    fires = list(itertools.islice(schedule.fire_times(after), 3))
    assert fires == list(itertools.islice(schedule.fire_times(after.astimezone(UTC)), 3))
    assert all(fire.tzinfo is UTC for fire in fires) and fires[0] > after
