"""The trigger: the ticker fires straight from the schedules table, over real PostgreSQL on a virtual clock."""

from __future__ import annotations

import logging
import threading
from itertools import takewhile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tickwarden import catalog
from tickwarden.cadence import CronSchedule
from tickwarden.store.catalog import ScheduleContent, WorkflowContent
from tickwarden.store.ledger import TickGroup, TickRequest
from tickwarden.store.trigger import Advance, int_array_literal, parse_int_array
from tickwarden.ticker import Ticker

T0 = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)

FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: every-minute
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "* * * * *", starting_deadline_seconds: %(deadline)d}
    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]
  - name: nightly
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 2 * * *"}
    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]
"""


def apply(db, tmp_path: Path, now: datetime, deadline: int = 300) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE % {"deadline": deadline})
    catalog.apply_file(db, path, now)


def ticks(db, workflow: str = "every-minute") -> list[datetime]:
    runs = catalog.list_runs(db, "acme", workflow, limit=1000)
    return sorted(r.scheduled_for for r in runs if not r.manual)


def drive(db, start: datetime, end: datetime, *, step: timedelta = timedelta(seconds=20), ticker=None) -> None:
    ticker = ticker or Ticker(db)
    now = start
    while now <= end:
        ticker.run_once(now)
        now += step


def next_fire_times(db) -> dict[str, datetime | None]:
    with db.connection() as conn:
        rows = conn.execute("SELECT w.name, f.next_fire_at FROM schedule_fires f JOIN workflows w ON w.id = f.workflow_id")
        return dict(rows.fetchall())


def minute(h: int, m: int) -> datetime:
    return datetime(2026, 11, 30, h, m, tzinfo=UTC)


def test_it_fires_one_run_per_tick_from_the_next_tick_after_publishing(db, tmp_path):
    apply(db, tmp_path, T0)
    drive(db, T0, minute(12, 5) + timedelta(seconds=15))
    assert ticks(db) == [minute(12, m) for m in range(1, 6)]
    assert ticks(db, "nightly") == []


def test_a_tick_gets_its_retry_budget_and_deadline_from_the_profile(db, tmp_path):
    apply(db, tmp_path, T0)
    drive(db, T0, datetime(2026, 12, 1, 2, 0, 40, tzinfo=UTC), step=timedelta(hours=1))
    nightly = catalog.list_runs(db, "acme", "nightly")
    assert len(nightly) == 1 and nightly[0].retry_budget == 3
    every = catalog.list_runs(db, "acme", "every-minute", limit=1)[0]
    assert every.retry_budget == 0
    assert every.deadline_at > every.scheduled_for


def test_a_paused_schedule_gets_no_new_ticks_and_resumes_from_the_next_future_tick(db, tmp_path):
    apply(db, tmp_path, T0)
    ticker = Ticker(db)
    drive(db, T0, minute(12, 2) + timedelta(seconds=15), ticker=ticker)
    catalog.pause(db, "acme", "every-minute", minute(12, 2) + timedelta(seconds=15))
    drive(db, minute(12, 2) + timedelta(seconds=20), minute(12, 10), ticker=ticker)
    assert ticks(db) == [minute(12, 1), minute(12, 2)]
    assert next_fire_times(db) == {"every-minute": None, "nightly": datetime(2026, 12, 1, 2, 0, tzinfo=UTC)}
    catalog.resume(db, "acme", "every-minute", minute(12, 10) + timedelta(seconds=30))
    drive(db, minute(12, 10) + timedelta(seconds=40), minute(12, 13) + timedelta(seconds=5),
          ticker=ticker)
    assert ticks(db) == [minute(12, 1), minute(12, 2), minute(12, 11), minute(12, 12), minute(12, 13)]


def test_pausing_takes_effect_at_the_tickers_next_pass(db, tmp_path):
    apply(db, tmp_path, T0)
    ticker = Ticker(db)
    drive(db, T0, minute(12, 1) + timedelta(seconds=15), ticker=ticker)
    catalog.pause(db, "acme", "every-minute", minute(12, 1) + timedelta(seconds=15))
    for m in range(2, 6):
        ticker.run_once(minute(12, m) + timedelta(seconds=1))
    assert ticks(db) == [minute(12, 1)]


def test_a_cron_edit_takes_effect_at_the_tickers_next_pass(db, tmp_path):
    apply(db, tmp_path, T0)
    ticker = Ticker(db)
    drive(db, T0, minute(12, 1) + timedelta(seconds=15), ticker=ticker)
    path = tmp_path / "fleet.yaml"
    path.write_text(path.read_text().replace('"* * * * *"', '"*/5 * * * *"'))
    catalog.apply_file(db, path, minute(12, 1) + timedelta(seconds=30))
    drive(db, minute(12, 1) + timedelta(seconds=40), minute(12, 11), ticker=ticker)
    assert ticks(db) == [minute(12, 1), minute(12, 5), minute(12, 10)]


def test_ticks_older_than_the_starting_deadline_are_not_run_late(db, tmp_path):
    apply(db, tmp_path, T0, deadline=120)
    ticker = Ticker(db)
    drive(db, T0, minute(12, 1) + timedelta(seconds=15), ticker=ticker)
    # every replica is down from 12:01:15 to 12:30:10: 29 ticks pass unseen
    back = minute(12, 30) + timedelta(seconds=10)
    ticker.run_once(back)
    # only the ticks inside the two-minute deadline run (12:29 and 12:30), no burst of stale ones
    assert ticks(db) == [minute(12, 1), minute(12, 29), minute(12, 30)]
    assert ticker.stale == 27
    drive(db, back + timedelta(seconds=20), minute(12, 32) + timedelta(seconds=15), ticker=ticker)
    assert ticks(db)[-2:] == [minute(12, 31), minute(12, 32)]


def test_suppressed_ticks_are_skipped_and_not_run_late(db, tmp_path):
    apply(db, tmp_path, T0)
    outage = (minute(12, 2), minute(12, 4))
    ticker = Ticker(db, suppressed=lambda workflow_id, tick: outage[0] <= tick < outage[1])
    drive(db, T0, minute(12, 6) + timedelta(seconds=15), ticker=ticker)
    assert ticks(db) == [minute(12, 1), minute(12, 4), minute(12, 5), minute(12, 6)]


def test_an_archived_workflow_fires_no_more(db, tmp_path):
    apply(db, tmp_path, T0)
    ticker = Ticker(db)
    drive(db, T0, minute(12, 1) + timedelta(seconds=15), ticker=ticker)
    with db.connection() as conn:
        conn.execute("UPDATE workflows SET archived_at = %s WHERE name = 'every-minute'", (T0,))
    drive(db, minute(12, 1) + timedelta(seconds=20), minute(12, 5), ticker=ticker)
    assert ticks(db) == [minute(12, 1)]


def test_a_published_schedule_carries_its_first_fire_time_from_the_same_transaction(db, tmp_path):
    apply(db, tmp_path, T0)
    assert next_fire_times(db) == {"every-minute": minute(12, 1), "nightly": datetime(2026, 12, 1, 2, 0, tzinfo=UTC)}


def test_the_ticker_sleeps_until_the_next_fire_time_but_not_longer_than_its_cap(db, tmp_path):
    apply(db, tmp_path, T0)
    ticker = Ticker(db, max_sleep=timedelta(seconds=60))
    assert ticker.run_once(T0) == minute(12, 1)
    assert Ticker(db, max_sleep=timedelta(seconds=10)).run_once(T0) == T0 + timedelta(seconds=10)


def test_replicas_racing_make_exactly_one_run_per_tick(db, tmp_path):
    apply(db, tmp_path, T0)
    with db.transaction() as store:
        tenant = store.catalog.get_tenant_by_name("acme")
        env = store.catalog.apply_environment(tenant.id, "default", None, 600, T0).id
        user = store.catalog.apply_user(tenant.id, "ops@acme.test", "ops", True, T0).id
        for i in range(40):
            (w,) = store.catalog.apply_workflows([WorkflowContent(
                tenant_id=tenant.id, name=f"wf-{i}", description="", environment_id=env, publisher_id=user,
                recipe={"steps": []}, timeout_seconds=None, monitoring_enabled=True, policy_overrides={},
                shadow=False)], T0)
            store.catalog.apply_schedules([ScheduleContent(
                tenant_id=tenant.id, workflow_id=w.id, cron="* * * * *", timezone="UTC", status="active",
                cadence_seconds=60, starting_deadline_seconds=300)], T0)
    minutes = 12
    barrier = threading.Barrier(5)
    errors: list[BaseException] = []

    def run(loop) -> None:
        try:
            for i in range(minutes * 6):
                barrier.wait(timeout=30)
                loop.run_once(T0 + timedelta(seconds=10 * i))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()

    loops = [Ticker(db, batch=7) for _ in range(5)]
    threads = [threading.Thread(target=run, args=(loop,)) for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    # each racing pass leaves whatever it could not take to the next one; one final
    # quiet pass settles the last minute
    Ticker(db).run_once(T0 + timedelta(minutes=minutes))
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT workflow_id, count(*), count(DISTINCT scheduled_for), min(scheduled_for), max(scheduled_for)"
            " FROM runs WHERE NOT manual GROUP BY workflow_id"
        ).fetchall()
    every_minute = [r for r in rows if r[0] != 2]
    assert len(every_minute) == 41
    for _, count, distinct, first, last in every_minute:
        assert count == distinct == minutes and first == minute(12, 1) and last == minute(12, 12)


def test_a_pass_sleeps_until_the_next_fire_or_looks_again_soon_while_a_due_schedule_is_held_elsewhere(db, tmp_path):
    apply(db, tmp_path, T0)
    ticker = Ticker(db)
    # both entries moved on: the every-minute one fires next, at 12:02
    assert ticker.run_once(minute(12, 1)) == minute(12, 2)
    # another replica holds the every-minute entry, due at 12:02: this pass moves nothing
    # and looks again shortly rather than sleeping until 12:03
    with db.transaction() as other:
        held = other.trigger.claim_due(minute(12, 2), 10)
        assert [e.cron for e in held] == ["* * * * *"]
        assert ticker.run_once(minute(12, 2)) == minute(12, 2) + timedelta(seconds=1)
    # the moved entries' new times count too: after 12:02 fires, the next wake-up is 12:03
    assert ticker.run_once(minute(12, 2) + timedelta(seconds=1)) == minute(12, 3)


def test_a_full_batch_looks_again_at_once_only_while_schedules_are_still_due(db, tmp_path):
    apply(db, tmp_path, T0)
    add_workflows(db, [("second", "* * * * *", "UTC")])
    ticker = Ticker(db, batch=1)
    # two schedules due at 12:01, a batch of one: the other is taken at once
    assert ticker.run_once(minute(12, 1)) == minute(12, 1)
    # the batch is full again but nothing is due any more: no empty pass, sleep until 12:02
    assert ticker.run_once(minute(12, 1)) == minute(12, 2)
    assert ticks(db) == ticks(db, "second") == [minute(12, 1)]


def test_an_edit_waits_for_a_pass_holding_its_fire_row_and_its_fire_time_wins(db, tmp_path):
    apply(db, tmp_path, T0)
    edited = threading.Event()

    def edit() -> None:
        with db.transaction() as store:
            workflow = store.catalog.get_workflow_by_name("acme", "every-minute")
            assert workflow is not None
            store.catalog.apply_schedules([ScheduleContent(
                tenant_id=workflow.tenant_id, workflow_id=workflow.id, cron="*/5 * * * *", timezone="UTC",
                status="active", cadence_seconds=300, starting_deadline_seconds=300)],
                minute(12, 1) + timedelta(seconds=5))
        edited.set()

    with db.transaction() as other:
        # a pass at 12:01 has read the schedule (every minute) and holds its fire row
        held = other.trigger.claim_due(minute(12, 1), 10)
        assert [e.cron for e in held] == ["* * * * *"]
        thread = threading.Thread(target=edit)
        thread.start()
        assert not edited.wait(0.5)   # the edit's write of the fire row waits for the pass
        other.ledger.create_tick_groups(
            [TickGroup(held[0].workflow_ids, held[0].tenant_ids, ((minute(12, 1), minute(12, 11)),), 0)],
            minute(12, 1), [Advance(held[0].schedule_ids, minute(12, 2), minute(12, 1))])
    thread.join(timeout=30)
    assert edited.is_set()
    # the tick the pass fired stays; the edit's next fire time replaces the pass's
    assert ticks(db) == [minute(12, 1)]
    assert next_fire_times(db)["every-minute"] == minute(12, 5)


def test_the_claimed_ticks_insert_is_exclusive_and_a_run_already_there_fails_it_whole(db, tmp_path):
    apply(db, tmp_path, T0)
    with db.transaction() as store:
        workflow = store.catalog.get_workflow_by_name("acme", "every-minute")
        assert workflow is not None
        store.ledger.create_tick_run(TickRequest(workflow.tenant_id, workflow.id, minute(12, 1), 0, minute(12, 11)), T0)
    with pytest.raises(psycopg.errors.UniqueViolation), db.transaction() as store:
        held = store.trigger.claim_due(minute(12, 1), 10)
        assert [e.cron for e in held] == ["* * * * *"]
        store.ledger.send_tick_groups([TickGroup(held[0].workflow_ids, held[0].tenant_ids,
                                                 ((minute(12, 1), minute(12, 11)),), 0)],
                                      minute(12, 1), [Advance(held[0].schedule_ids, minute(12, 2), minute(12, 1))])
    # rolled back whole: the fire row has not moved
    assert next_fire_times(db)["every-minute"] == minute(12, 1)


def test_a_pass_meeting_a_tick_that_already_has_its_run_fires_again_passing_over_it(db, tmp_path, caplog):
    apply(db, tmp_path, T0)
    add_workflows(db, [("second", "* * * * *", "UTC")])
    with db.transaction() as store:
        workflow = store.catalog.get_workflow_by_name("acme", "every-minute")
        assert workflow is not None
        # another trigger recorded the 12:01 tick first
        store.ledger.create_tick_run(TickRequest(workflow.tenant_id, workflow.id, minute(12, 1), 0, minute(12, 11)), T0)
    ticker = Ticker(db)
    with caplog.at_level(logging.WARNING, logger="tickwarden.ticker"):
        assert ticker.run_once(minute(12, 1) + timedelta(seconds=1)) == minute(12, 2)
    assert "already had its run" in caplog.text
    assert ticker.last_pass is not None and (ticker.last_pass.fired, ticker.last_pass.created) == (2, 1)
    assert ticker.created == 1 and ticker.fired == 2
    assert ticks(db) == ticks(db, "second") == [minute(12, 1)]
    assert next_fire_times(db)["every-minute"] == next_fire_times(db)["second"] == minute(12, 2)
    # the next minute is an ordinary exclusive pass again
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tickwarden.ticker"):
        ticker.run_once(minute(12, 2) + timedelta(seconds=1))
    assert "already had its run" not in caplog.text
    assert ticks(db) == ticks(db, "second") == [minute(12, 1), minute(12, 2)]


def test_moving_a_fleet_on_writes_each_fire_rows_new_version_on_its_own_page(db, tmp_path):
    apply(db, tmp_path, T0)
    with db.connection() as conn:
        conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                     " SELECT t.id, 'fleet-' || g, %(t)s, %(t)s FROM tenants t, generate_series(1, 600) g", {"t": T0})
        conn.execute("INSERT INTO schedules (tenant_id, workflow_id, cron, timezone, status, cadence_seconds, version,"
                     " created_at, updated_at) SELECT tenant_id, id, '* * * * *', 'UTC', 'active', 60, 1, %(t)s, %(t)s"
                     " FROM workflows WHERE name LIKE 'fleet-%%'", {"t": T0})
        conn.execute("INSERT INTO schedule_fires (schedule_id, tenant_id, workflow_id, next_fire_at)"
                     " SELECT s.id, s.tenant_id, s.workflow_id, %(next)s FROM schedules s"
                     " WHERE NOT EXISTS (SELECT FROM schedule_fires f WHERE f.schedule_id = s.id)", {"next": minute(12, 1)})
        conn.commit()

        def pages() -> dict[int, int]:
            rows = conn.execute("SELECT schedule_id, (ctid::text::point)[0]::int FROM schedule_fires").fetchall()
            conn.commit()
            return dict(rows)

        before = pages()
        assert len(set(before.values())) > 2   # several pages, each filled as far as the table lets inserts fill it
        ticker = Ticker(db)
        ticker.run_once(minute(12, 1))
        assert ticker.last_pass is not None and ticker.last_pass.created == 601
        assert pages() == before   # room was left for every row's next version beside it
        moved = conn.execute("SELECT DISTINCT next_fire_at, last_fired_at FROM schedule_fires f JOIN workflows w"
                             " ON w.id = f.workflow_id WHERE w.name LIKE 'fleet-%%'").fetchall()
        assert moved == [(minute(12, 2), minute(12, 1))]


def add_workflows(db, specs: list[tuple[str, str, str]], *, deadline: int = 300, cadence: int = 60) -> dict[str, int]:
    """Add workflows of tenant acme, each (name, cron, zone) with an active schedule; return their ids."""
    ids = {}
    with db.transaction() as store:
        tenant = store.catalog.get_tenant_by_name("acme")
        env = store.catalog.apply_environment(tenant.id, "default", None, 600, T0).id
        user = store.catalog.apply_user(tenant.id, "ops@acme.test", "ops", True, T0).id
        for name, cron, zone in specs:
            (w,) = store.catalog.apply_workflows([WorkflowContent(
                tenant_id=tenant.id, name=name, description="", environment_id=env, publisher_id=user,
                recipe={"steps": []}, timeout_seconds=None, monitoring_enabled=True, policy_overrides={},
                shadow=False)], T0)
            store.catalog.apply_schedules([ScheduleContent(
                tenant_id=tenant.id, workflow_id=w.id, cron=cron, timezone=zone, status="active",
                cadence_seconds=cadence, starting_deadline_seconds=deadline)], T0)
            ids[name] = w.id
    return ids


def test_alike_due_schedules_are_claimed_as_one_group_and_each_gets_its_run(db, tmp_path):
    apply(db, tmp_path, T0)
    ids = add_workflows(db, [(f"wf-{i}", "* * * * *", "UTC") for i in range(30)])
    with db.transaction() as store:
        groups = store.trigger.claim_due(minute(12, 1), 100)
    alike = [g for g in groups if set(ids.values()) <= set(parse_int_array(g.workflow_ids))]
    assert len(alike) == 1 and alike[0].members >= 30 and alike[0].next_fire_at == minute(12, 1)
    ticker = Ticker(db)
    ticker.run_once(minute(12, 1) + timedelta(seconds=1))
    assert ticker.last_pass is not None and ticker.last_pass.created == ticker.last_pass.fired == 31
    for name in ids:
        assert ticks(db, name) == [minute(12, 1)]


def test_a_trigger_outage_of_one_member_leaves_the_rest_of_its_group_firing(db, tmp_path):
    apply(db, tmp_path, T0)
    ids = add_workflows(db, [(f"wf-{i}", "* * * * *", "UTC") for i in range(5)])
    down = ids["wf-2"]
    ticker = Ticker(db, suppressed=lambda workflow_id, tick: workflow_id == down and minute(12, 2) <= tick < minute(12, 4))
    drive(db, T0, minute(12, 3) + timedelta(seconds=15), ticker=ticker)
    assert ticks(db, "wf-2") == [minute(12, 1)]
    with db.connection() as conn:
        last = dict(conn.execute("SELECT workflow_id, last_fired_at FROM schedule_fires").fetchall())
    assert last[down] == minute(12, 1)
    assert all(last[ids[f"wf-{i}"]] == minute(12, 3) for i in (0, 1, 3, 4))
    drive(db, minute(12, 3) + timedelta(seconds=20), minute(12, 5) + timedelta(seconds=15), ticker=ticker)
    assert ticks(db, "wf-2") == [minute(12, 1), minute(12, 4), minute(12, 5)]
    for i in (0, 1, 3, 4):
        assert ticks(db, f"wf-{i}") == [minute(12, m) for m in range(1, 6)]


def test_a_window_no_outage_touches_fires_its_group_without_asking_member_by_member(db, tmp_path):
    apply(db, tmp_path, T0)
    ids = add_workflows(db, [(f"wf-{i}", "* * * * *", "UTC") for i in range(5)])
    down, outage = ids["wf-2"], (minute(12, 2), minute(12, 4))
    asked: list[datetime] = []

    def suppressed(workflow_id: int, tick: datetime) -> bool:
        asked.append(tick)
        return workflow_id == down and outage[0] <= tick < outage[1]

    ticker = Ticker(db, suppressed=suppressed,
                    suppressing=lambda first, last: {down} if outage[0] <= last and first < outage[1] else set())
    drive(db, T0, minute(12, 5) + timedelta(seconds=15), ticker=ticker)
    assert sorted(set(asked)) == [minute(12, 2), minute(12, 3)]  # the windows of minutes 1, 4 and 5: never asked
    assert ticks(db, "wf-2") == [minute(12, 1), minute(12, 4), minute(12, 5)]
    for i in (0, 1, 3, 4):
        assert ticks(db, f"wf-{i}") == [minute(12, m) for m in range(1, 6)]


def test_shared_fire_times_match_each_schedule_computed_on_its_own_across_dst_and_zones(db, tmp_path):
    apply(db, tmp_path, T0)
    # 2027-03-14 (New York) and 2027-03-28 (Berlin) move clocks forward; 2027-04-04 (Sydney) back:
    # two schedules per (expression, zone), so each group has members, and groups differ by zone.
    zones = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney"]
    crons = ["30 2 * * *", "0 */7 * * *"]
    specs = [(f"c{c}-z{z}-{n}", cron, zone) for c, cron in enumerate(crons) for z, zone in enumerate(zones)
             for n in range(2)]
    ids = add_workflows(db, specs, deadline=86400, cadence=86400)
    start, end = datetime(2027, 3, 12, tzinfo=UTC), datetime(2027, 4, 6, tzinfo=UTC)
    walks = {name: list(takewhile(lambda t: t <= end, CronSchedule(cron, zone).walk(start)))
             for name, cron, zone in specs}
    with db.connection() as conn:
        for name, fires in walks.items():
            conn.execute("UPDATE schedule_fires SET next_fire_at = %s WHERE workflow_id = %s", (fires[0], ids[name]))
    drive(db, start, end, step=timedelta(hours=3))
    for name, fires in walks.items():
        assert len(fires) > 20 and ticks(db, name) == fires, name


def test_a_pass_reports_the_earliest_fire_time_it_read_after_its_own_writes(db, tmp_path):
    apply(db, tmp_path, T0)
    ticker = Ticker(db)
    ticker.run_once(minute(12, 1))
    # what a look at the schedules reads now: the every-minute entry, moved on to 12:02
    with db.transaction() as store:
        assert store.trigger.earliest_fire() == minute(12, 2)
    assert ticker.last_pass is not None and ticker.last_pass.earliest == minute(12, 2)


def test_the_claim_reads_the_earliest_fire_time_of_what_it_did_not_take_and_a_pass_reads_nothing_after_its_writes(
        db, tmp_path, monkeypatch):
    apply(db, tmp_path, T0)
    with db.transaction() as store:  # 12:01: the every-minute schedule is due, the nightly one not
        groups, later = store.trigger.claim_due_and_earliest(minute(12, 1), 10)
        assert [g.cron for g in groups] == ["* * * * *"] and later == datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
    with db.transaction() as store:  # nothing due: the one row carries the earliest fire time of all
        assert store.trigger.claim_due_and_earliest(minute(12, 0), 10) == ([], minute(12, 1))

    def no_read(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a pass that claimed knows the earliest fire time without reading it")

    monkeypatch.setattr("tickwarden.store.trigger.TriggerRepository.submit_earliest_fire", no_read)
    ticker = Ticker(db)
    assert ticker.run_once(minute(12, 1)) == minute(12, 2)  # what it wrote for the every-minute schedule
    assert ticker.last_pass is not None and ticker.last_pass.created == 1


def test_an_idle_pass_is_one_look_in_one_round_trip_with_no_transaction(schema, tmp_path):
    from psycopg.pq import Trace

    from tickwarden.db import Database
    from tests.dbutil import TEST_URL

    db = Database(TEST_URL, schema=schema, min_size=1, max_size=1)
    try:
        apply(db, tmp_path, T0)
        ticker = Ticker(db)
        ticker.run_once(minute(12, 1))  # fires 12:01; the next tick is 12:02
        trace = tmp_path / "trace"
        with trace.open("w") as sink:
            with db.connection() as conn:  # the pool's one connection, which the pass borrows next
                conn.pgconn.trace(sink.fileno())
                conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
            assert ticker.run_once(minute(12, 1) + timedelta(seconds=20)) == minute(12, 2)
            with db.connection() as conn:
                conn.pgconn.untrace()
        assert ticker.last_pass.claimed == 0
        # The client waits once per burst of messages it sends before the server answers: a
        # round trip. The pool's check of the lent connection sends nothing, and a pass with
        # nothing due is its look at the earliest fire time alone, committed on its own: no
        # BEGIN, no claim, no lock, no COMMIT (before: BEGIN with the claim and the look, then
        # COMMIT; earlier still, the check's empty query too). The look goes as a simple query
        # until psycopg prepares it (at its fifth use), then as an extended-protocol Execute.
        assert sent_before_each_answer(trace) in ([["Query"]], [["Execute", "Sync"]])
    finally:
        db.close()


def test_a_pass_at_its_own_fire_time_claims_at_once_and_an_early_one_finds_what_another_writer_made_due(
        schema, tmp_path):
    from psycopg.pq import Trace

    from tickwarden.db import Database
    from tests.dbutil import TEST_URL

    db = Database(TEST_URL, schema=schema, min_size=1, max_size=1)
    try:
        apply(db, tmp_path, T0)
        ticker = Ticker(db)
        assert ticker.run_once(minute(12, 1)) == minute(12, 2)
        trace = tmp_path / "trace"
        with trace.open("w") as sink:
            with db.connection() as conn:
                conn.pgconn.trace(sink.fileno())
                conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
            ticker.run_once(minute(12, 2))  # woken by its own timer: the claim goes first, no look
            with db.connection() as conn:
                conn.pgconn.untrace()
        # Two round trips: BEGIN with the claim; the insert, whose count is not read back (it
        # makes every run it is given or fails), with COMMIT.
        assert sent_before_each_answer(trace) == [["BEGIN", "Execute", "Flush"], ["Execute", "COMMIT", "Sync"]]
        assert ticker.last_pass.created == 1
        # the insert's time is the wait for its result, which comes with the commit's
        assert ticker.last_pass.insert_ms > 0 and ticker.last_pass.advance_ms == 0
        assert ticks(db) == [minute(12, 1), minute(12, 2)]

        # Woken early (a poll, another replica's wake-up): the look sees the schedule another
        # writer made due since the last pass, though this ticker expected nothing until 12:03.
        add_workflows(db, [("joined", "* * * * *", "UTC")])  # published by another writer, first due 12:01
        ticker.run_once(minute(12, 2) + timedelta(seconds=30))
        assert ticker.last_pass.claimed == 1 and ticks(db, "joined") == [minute(12, 1), minute(12, 2)]
    finally:
        db.close()


def sent_before_each_answer(trace: Path) -> list[list[str]]:
    """From libpq's trace: the messages the client sent before each answer, statements named
    by their text when it is a bare BEGIN or COMMIT, else by `Execute`."""
    bursts: list[list[str]] = []
    burst: list[str] = []
    named = ""
    for line in trace.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0] not in ("F", "B"):
            continue  # a statement's text goes on over several lines
        if parts[0] == "B":
            if burst:
                bursts.append(burst)
                burst = []
            continue
        message = parts[2]
        if message == "Parse":
            text = parts[3].split('"')[3] if len(parts) > 3 and parts[3].count('"') >= 4 else ""
            named = text if text in ("BEGIN", "COMMIT") else ""
        elif message == "Execute":
            burst.append(named or "Execute")
            named = ""
        elif message in ("Sync", "Flush", "Query") and not (message == "Flush" and burst[-1:] == ["Sync"]):
            burst.append(message)  # a flush right after a sync asks for nothing more
    return bursts


def test_migrating_populated_schedules_keeps_each_fire_time_and_the_ticker_goes_on_from_it():
    import psycopg

    from tests.dbutil import TEST_URL, drop_schema, make_schema, upgrade_before
    from tickwarden import migrate
    from tickwarden.db import Database

    name = make_schema("mig")
    everything = migrate.available_migrations()
    last_fired = minute(11, 59)
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            upgrade_before(conn, 28, T0)
            conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'Acme', %s)", (T0,))
            conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                         " SELECT id, w, %s, %s FROM tenants, unnest(ARRAY['live', 'held']) w", (T0, T0))
            # `live` last fired at 11:59 and next fires at 12:00; `held` is paused with a stale fire time.
            conn.execute("""INSERT INTO schedules (tenant_id, workflow_id, cron, status, cadence_seconds,
                                                   created_at, updated_at, next_fire_at, last_fired_at)
                            SELECT tenant_id, id, '* * * * *', CASE name WHEN 'live' THEN 'active' ELSE 'paused' END,
                                   60, %(t)s, %(t)s, %(next)s, %(last)s FROM workflows""",
                         {"t": T0, "next": minute(12, 0), "last": last_fired})
            conn.commit()
            assert [m.version for m in migrate.upgrade(conn, T0)] == [m.version for m in everything if m.version >= 28]
            fires = conn.execute("SELECT w.name, f.next_fire_at, f.last_fired_at FROM schedule_fires f"
                                 " JOIN workflows w ON w.id = f.workflow_id ORDER BY 1").fetchall()
            assert fires == [("held", None, last_fired), ("live", minute(12, 0), last_fired)]
        db = Database(TEST_URL, schema=name, min_size=1, max_size=2)
        try:
            ticker = Ticker(db)
            assert ticker.run_once(minute(11, 59) + timedelta(seconds=30)) == minute(12, 0)
            ticker.run_once(minute(12, 0))
            ticker.run_once(minute(12, 0) + timedelta(seconds=5))  # again within the minute: nothing more
            with db.connection() as conn:
                runs = conn.execute("SELECT w.name, r.scheduled_for FROM runs r JOIN workflows w ON w.id = r.workflow_id"
                                    " ORDER BY 1, 2").fetchall()
            assert runs == [("live", minute(12, 0))]
        finally:
            db.close()
    finally:
        drop_schema(name)


def test_a_groups_members_and_their_runs_ids_follow_the_workflows_ids_wherever_the_rows_lie(db, tmp_path):
    """The claim lists a group's members by workflow id, and the insert numbers their runs in that order.

    Not in the order the rows happen to be read: each pass moves a fire row to a new version,
    whose place (and so the order in which a scan, or the partial index's entries at one fire
    time, give the rows) depends on what VACUUM had freed by then, which an older snapshot
    elsewhere on the server delays. The same scenario then gave two workflows' runs at one tick
    each other's ids on a second run.
    """
    apply(db, tmp_path, T0)
    ids = add_workflows(db, [(f"wf-{i}", "* * * * *", "UTC") for i in range(8)])
    order = sorted(ids.values())
    with db.connection() as conn:
        # new versions of the rows the claim reads, written from the highest workflow id down:
        # whichever table its plan starts from, it meets them in the reverse of id order
        for workflow_id in reversed(order):
            conn.execute("UPDATE workflows SET description = description WHERE id = %(w)s", {"w": workflow_id})
            conn.execute("UPDATE schedules SET version = version WHERE workflow_id = %(w)s", {"w": workflow_id})
            conn.execute("UPDATE schedule_fires SET next_fire_at = %(t)s WHERE workflow_id = %(w)s",
                         {"t": minute(12, 3), "w": workflow_id})
        conn.commit()
        # Mostly the reverse of id order; where exactly each version lies is the server's (a page
        # pruned between two of the updates, which other sessions' snapshots allow or not, takes
        # the next version back in place), so the layout is only required to be out of id order.
        for table, column in (("workflows", "id"), ("schedules", "workflow_id"), ("schedule_fires", "workflow_id")):
            laid = [w for (w,) in conn.execute(f"SELECT {column} FROM {table} WHERE {column} = ANY(%(w)s) ORDER BY ctid",
                                               {"w": order})]
            assert sorted(laid) == order and laid != order, (table, laid)
        conn.commit()
    with db.transaction() as store:
        groups = store.trigger.claim_due(minute(12, 3), 100)
    (alike,) = [g for g in groups if set(order) <= set(parse_int_array(g.workflow_ids))]
    members = parse_int_array(alike.workflow_ids)
    assert members == sorted(members)
    Ticker(db).run_once(minute(12, 3) + timedelta(seconds=1))
    with db.connection() as conn:
        runs = conn.execute("SELECT workflow_id FROM runs WHERE workflow_id = ANY(%(w)s) AND scheduled_for = %(t)s"
                            " ORDER BY id", {"w": order, "t": minute(12, 3)}).fetchall()
    assert [w for (w,) in runs] == order


@pytest.mark.parametrize("plans", ["force_generic_plan", "force_custom_plan"])
def test_the_tick_insert_numbers_runs_group_by_group_tick_by_tick_member_by_member_whatever_its_plan(
        db, tmp_path, plans):
    """The runs take their ids in the order the ticks were given, whichever way the plan joins them.

    The generic plan the simulator runs (and a deployment's after a few executions) hashed the
    ticks and read a group's back from the hash last first; a custom plan can join them
    otherwise. Either way the ids follow each group in turn, its ticks oldest first, and at
    each tick its members in their array's order.
    """
    apply(db, tmp_path, T0)
    ids = add_workflows(db, [(f"wf-{i}", "0 0 1 1 *", "UTC") for i in range(4)])
    first, second = sorted(ids.values())[:2], sorted(ids.values())[2:]
    ticks = [minute(13, m) for m in (1, 2, 3)]
    with db.transaction() as store:
        store.conn.execute(f"SET LOCAL plan_cache_mode = {plans}")
        tenant = store.catalog.get_tenant_by_name("acme").id
        groups = [TickGroup(int_array_literal(members), int_array_literal([tenant] * len(members)),
                            tuple((t, t + timedelta(minutes=10)) for t in ticks), 0, (), 1)
                  for members in (first, second)]
        for _ in range(6):  # past psycopg's threshold too: the statement prepared, its plan kept
            assert store.ledger.create_tick_groups(groups, minute(13, 4)) == 12
            runs = store.conn.execute("SELECT workflow_id, scheduled_for FROM runs WHERE workflow_id = ANY(%(w)s)"
                                      " ORDER BY id", {"w": list(ids.values())}).fetchall()
            assert runs == [(w, t) for members in (first, second) for t in ticks for w in members]
            store.conn.execute("DELETE FROM attempts WHERE workflow_id = ANY(%(w)s)", {"w": list(ids.values())})
            store.conn.execute("DELETE FROM runs WHERE workflow_id = ANY(%(w)s)", {"w": list(ids.values())})
