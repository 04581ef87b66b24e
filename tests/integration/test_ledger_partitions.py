"""The ledger partitioned by month: months created ahead, whole months dropped, rules across months."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.dbutil import TEST_URL, drop_schema, make_schema, upgrade_before
from tests.integration.pipeline import DAILY, create_tick, manual_run, workflow
from tests.integration.test_retention import YEAR_START, run_tick
from tests.helpers import streak
from tickwarden import migrate
from tickwarden.db import Database
from tickwarden.models import Attempt, AttemptOutcome, Workflow
from tickwarden.poller import OutcomePoller
from tickwarden.retention import RetentionSpec, RetentionSweeper, month_starts, set_tenant_retention
from tickwarden.store.base import text_of
from tickwarden.store.ledger import TickRequest, finish_params, finish_text, in_months

DAY = timedelta(days=1)


def rows(db: Database, query: str, *params: object) -> list[tuple]:
    with db.transaction() as store:
        return store.conn.execute(query, params).fetchall()


def ledger_tables(plan: list[dict], *, executed: bool = False) -> set[str]:
    """The ledger's partitions a JSON plan holds (with `executed`: those its execution opened)."""
    seen: set[str] = set()

    def walk(node: dict) -> None:
        if node.get("Relation Name", "").startswith(("runs_", "attempts_", "attempt_steps_")) \
                and (not executed or node.get("Actual Loops", 0) > 0):
            seen.add(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return seen


def generic_plan(conn: psycopg.Connection, text: str, params: dict[str, object]) -> list[dict]:
    """The JSON plan of `text` (a store statement) as the server plans it once for every execution.

    The statement is prepared with `$n` for its parameters and explained under
    `plan_cache_mode = force_generic_plan`, in the caller's transaction: what a prepared
    statement the server keeps would run, whatever the values.
    """
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    conn.execute("PREPARE tickwarden_generic AS " + re.sub(r"%\((\w+)\)[sb]", number, text))
    try:
        with psycopg.ClientCursor(conn) as cur:
            cur.execute(f"EXPLAIN (FORMAT JSON) EXECUTE tickwarden_generic ({', '.join('%s' for _ in names)})",
                        [params[n] for n in names])
            row = cur.fetchone()
            assert row is not None
            return row[0]
    finally:
        conn.execute("DEALLOCATE tickwarden_generic")


def relation_nodes(plan: list[dict]) -> list[str]:
    """The ledger's partitions a JSON plan names, once per node that reads or writes one."""
    found: list[str] = []

    def walk(node: dict) -> None:
        if node.get("Relation Name", "").startswith(("runs_", "attempts_", "attempt_steps_")):
            found.append(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return found


def months(db: Database) -> list[str]:
    return [r[0] for r in rows(db, "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                                   " WHERE i.inhparent = 'runs'::regclass AND c.relname <> 'runs_default'"
                                   " ORDER BY 1")]


def test_month_starts_are_utc_month_boundaries_across_a_year_end() -> None:
    now = datetime(2025, 11, 30, 23, 30, tzinfo=UTC)
    assert month_starts(now, 2) == [datetime(2025, 11, 1, tzinfo=UTC), datetime(2025, 12, 1, tzinfo=UTC),
                                    datetime(2026, 1, 1, tzinfo=UTC)]


def test_a_year_with_partitions_drops_whole_months_and_keeps_every_run_retention_promises(db: Database) -> None:
    """A tenant keeping 30 days: months go whole once nothing in them is kept; a broken
    workflow's streak pins its months, whose other runs the row-wise sweep removes."""
    days = 365
    steady = workflow(db, YEAR_START - DAY, tenant="short", name="steady", cadence=DAILY)
    broken = workflow(db, YEAR_START - DAY, tenant="short", name="broken", cadence=DAILY)
    with db.transaction() as store:
        set_tenant_retention(store, steady.tenant_id, RetentionSpec(metadata_days=30), YEAR_START - DAY)
        store.outbox.upsert_notification_channel(tenant_id=steady.tenant_id, name="ops", kind="recording",
                                          audience="customer", now=YEAR_START - DAY)
    poller = OutcomePoller(db, "p1")
    sweeper = RetentionSweeper(db)
    broken_from = 200  # the broken workflow fails from this day on, to the end
    dropped: list[str] = []
    for index in range(days):
        day = YEAR_START + index * DAY
        run_tick(db, steady, day, True)
        run_tick(db, broken, day, index < broken_from)
        poller.run_once(day + timedelta(minutes=5))
        if index % 7 == 6 or index == days - 1:
            result = sweeper.sweep(day + timedelta(hours=1))
            dropped += result.months_dropped
    now = YEAR_START + (days - 1) * DAY + timedelta(hours=1)

    # Every run lives in its own month's partition, none in the default one.
    assert rows(db, "SELECT count(*) FROM runs_default") == [(0,)]
    assert rows(db, "SELECT count(*) FROM runs r WHERE to_char(r.scheduled_for AT TIME ZONE 'UTC', '\"p\"YYYYMM')"
                    " <> substr(r.tableoid::regclass::text, strpos(r.tableoid::regclass::text, '_p') + 1)") == [(0,)]
    # Months are there ahead of the clock.
    ahead = [f"runs_p{m.year}{m.month:02d}" for m in month_starts(now, 2)]
    assert set(ahead) <= set(months(db))

    # Months before the broken streak went whole; from the streak's month on they stay.
    newest_broken_success = YEAR_START + (broken_from - 1) * DAY
    streak_month = f"p{newest_broken_success.year}{newest_broken_success.month:02d}"
    assert dropped and all(m < streak_month for m in dropped), dropped
    assert dropped == sorted(dropped) and dropped[0] == "p202501"
    assert all(m >= f"runs_{streak_month}" for m in months(db)), months(db)

    # Exactly what retention promises is left: the steady workflow's last 30 days, the broken
    # one's runs from its newest success on (its open alert reads them).
    kept = rows(db, "SELECT workflow_id, min(scheduled_for), count(*) FROM runs GROUP BY workflow_id")
    by_workflow = {w: (first, count) for w, first, count in kept}
    first_steady = min(YEAR_START + i * DAY for i in range(days) if YEAR_START + i * DAY >= now - 30 * DAY)
    assert by_workflow[steady.id] == (first_steady, (YEAR_START + (days - 1) * DAY - first_steady) // DAY + 1)
    assert by_workflow[broken.id] == (newest_broken_success, days - broken_from + 1)
    # Attempts and steps went with their runs, months dropped or rows deleted.
    assert rows(db, "SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = a.run_id)"
                    " OR NOT EXISTS (SELECT 1 FROM attempt_steps s WHERE s.attempt_id = a.id)") == [(0,)]
    assert rows(db, "SELECT count(*) FROM attempts") == [(sum(c for _, c in by_workflow.values()),)]
    (status, failures), = rows(db, "SELECT status, failure_count FROM alerts WHERE workflow_id = %s"
                                   " ORDER BY id DESC LIMIT 1", broken.id)
    assert status == "open" and failures == days - broken_from
    with db.transaction() as store:
        assert streak(store, broken.id) == days - broken_from
        totals = store.retention.totals()
    assert totals["metadata"] > 0


def test_two_loops_at_once_create_each_month_once_and_move_what_the_default_partition_caught(db: Database) -> None:
    wf = workflow(db, YEAR_START, cadence=DAILY)
    for index in range(3):
        run_tick(db, wf, YEAR_START + index * DAY, True)
    assert rows(db, "SELECT count(*) FROM runs_default") == [(3,)]
    sweepers = [RetentionSweeper(db) for _ in range(2)]
    barrier = threading.Barrier(2)
    created: list[int] = []
    errors: list[BaseException] = []

    def create(sweeper: RetentionSweeper) -> None:
        try:
            barrier.wait()
            created.append(sweeper.create_months(YEAR_START + 3 * DAY))
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(s,)) for s in sweepers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sum(created) == 3, created  # each month by one loop or the other, never twice
    assert months(db) == ["runs_p202501", "runs_p202502", "runs_p202503"]
    for table in ("runs", "attempts", "attempt_steps"):
        assert rows(db, f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1") == \
            [(f"{table}_p202501", 3)], table
    # Moved rows keep their ids and the sequences go on after them.
    later = create_tick(db, wf, YEAR_START + 3 * DAY, YEAR_START + 3 * DAY)
    assert later.id == 4


def test_two_loops_at_once_drop_a_month_once(db: Database) -> None:
    wfs = [workflow(db, YEAR_START, tenant=f"t{i}", name=f"w{i}", cadence=DAILY) for i in range(3)]
    sweeper = RetentionSweeper(db)
    sweeper.create_months(YEAR_START)
    for index in range(40):
        for wf in wfs:
            run_tick(db, wf, YEAR_START + index * DAY, True)
    with db.transaction() as store:
        store.conn.execute("ANALYZE runs_p202501")
    later = YEAR_START + 500 * DAY
    barrier = threading.Barrier(2)
    dropped: list[list[str]] = []
    errors: list[BaseException] = []

    def drop(s: RetentionSweeper) -> None:
        try:
            barrier.wait()
            dropped.append(s.drop_months(later).dropped)
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=drop, args=(RetentionSweeper(db),)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    # January went (by one loop), and March (created ahead, empty); February holds each
    # workflow's newest success, so it stays.
    assert sorted(m for d in dropped for m in d) == ["p202501", "p202503"]
    assert "runs_p202501" not in months(db) and "runs_p202502" in months(db)
    assert rows(db, "SELECT count(*), min(scheduled_for) FROM runs") == [(3 * 9, YEAR_START + 31 * DAY)]


def test_a_month_with_a_run_awaiting_an_outcome_or_a_long_retention_tenant_is_not_dropped(db: Database) -> None:
    wf = workflow(db, YEAR_START, tenant="long", cadence=DAILY)
    other = workflow(db, YEAR_START, tenant="short", name="other", cadence=DAILY)
    sweeper = RetentionSweeper(db)
    sweeper.create_months(YEAR_START)
    with db.transaction() as store:
        set_tenant_retention(store, wf.tenant_id, RetentionSpec(metadata_days=900), YEAR_START)
        set_tenant_retention(store, other.tenant_id, RetentionSpec(metadata_days=7), YEAR_START)
    for index in range(40):
        run_tick(db, other, YEAR_START + index * DAY, True)
    stuck = create_tick(db, other, YEAR_START + 10 * DAY + timedelta(hours=1), YEAR_START)  # never finishes
    later = YEAR_START + 500 * DAY
    # The queued run pins January (March, created ahead and left empty, goes).
    assert sweeper.drop_months(later).dropped == ["p202503"]
    rows(db, "UPDATE runs SET status = 'cancelled', finished_at = %s WHERE id = %s RETURNING id", later, stuck.id)
    rows(db, "UPDATE attempts SET status = 'cancelled', finished_at = %s WHERE run_id = %s RETURNING id", later, stuck.id)
    run_tick(db, wf, YEAR_START + 5 * DAY, True)  # a tenant that keeps 900 days has a run in January
    run_tick(db, wf, YEAR_START + 35 * DAY, True)  # (and a newer success: only its retention keeps it)
    assert sweeper.drop_months(later).dropped == []
    rows(db, "DELETE FROM runs WHERE workflow_id = %s RETURNING id", wf.id)
    assert sweeper.drop_months(later).dropped == ["p202501"]


def test_unique_rules_hold_across_months(db: Database) -> None:
    wf = workflow(db, YEAR_START, cadence=DAILY)
    sweeper = RetentionSweeper(db)
    sweeper.create_months(YEAR_START)
    tick = YEAR_START + 40 * DAY
    first = create_tick(db, wf, tick, tick)
    with db.transaction() as store:  # the ticker's racing insert of the same tick does nothing
        assert store.ledger.create_tick_run(TickRequest(wf.tenant_id, wf.id, tick, 0, tick + DAY), tick) is None
    manual_run(db, wf, tick)  # a manual run at the same instant is not a tick
    assert rows(db, "SELECT count(*) FROM runs WHERE scheduled_for = %s", tick) == [(2,)]
    with pytest.raises(psycopg.errors.UniqueViolation):
        rows(db, "INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, queued_at)"
                 " VALUES (%s, %s, %s, %s, 1, 'queued', %s)", wf.tenant_id, wf.id, first.id, tick, tick)
    with pytest.raises(psycopg.errors.ForeignKeyViolation):  # an attempt lives in its run's month
        rows(db, "INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, queued_at)"
                 " VALUES (%s, %s, %s, %s, 2, 'queued', %s)", wf.tenant_id, wf.id, first.id, YEAR_START, tick)


def test_every_month_partition_forces_row_level_security(db: Database, schema: str) -> None:
    acme = workflow(db, YEAR_START, tenant="acme", cadence=DAILY)
    globex = workflow(db, YEAR_START, tenant="globex", name="other", cadence=DAILY)
    RetentionSweeper(db).create_months(YEAR_START)
    run_tick(db, acme, YEAR_START, True)
    run_tick(db, globex, YEAR_START, True)
    flags = rows(db, "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,"
                     " has_table_privilege('tickwarden_app', c.oid, 'SELECT')"
                     " FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                     " WHERE i.inhparent IN ('runs'::regclass, 'attempts'::regclass, 'attempt_steps'::regclass)")
    assert len(flags) == 3 * 4 and all(f[1:] == (True, True, True) for f in flags), flags
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as conn:
        conn.execute("SET ROLE tickwarden_app")
        conn.execute("SELECT set_config('tickwarden.tenant_id', %s, false)", (str(acme.tenant_id),))
        for table in ("runs", "attempts", "attempt_steps"):
            for relation in (table, f"{table}_p202501"):
                seen = conn.execute(f"SELECT DISTINCT tenant_id FROM {relation}").fetchall()
                assert seen == [(acme.tenant_id,)], relation


# An attempt's columns before the partitioned ledger and since, less processed_at (its outcome_queue row now)
ATTEMPT_COLUMNS = ("id, tenant_id, workflow_id, run_id, number, status, worker_id, lease_expires_at, queued_at, started_at,"
                   " heartbeat_at, finished_at, retryable, error_category, error, failed_step, log_tail, outputs, rows")


def test_migrating_a_populated_ledger_in_place_keeps_every_row_id_and_rule() -> None:
    name = make_schema("mig")
    everything = migrate.available_migrations()
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            upgrade_before(conn, 23, YEAR_START)
            conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'Acme', %s), ('globex', 'Globex', %s)",
                         (YEAR_START, YEAR_START))
            conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                         " SELECT id, 'w' || id, %s, %s FROM tenants", (YEAR_START, YEAR_START))
            # Three months of daily ticks per workflow, an attempt and a step each; the last one failed.
            conn.execute(
                """
                INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,
                                  deadline_at, created_at, finished_at, error)
                SELECT w.tenant_id, w.id, %(t0)s + g * interval '1 day',
                       CASE WHEN g = 89 THEN 'failed' ELSE 'succeeded' END, 0, 1,
                       %(t0)s + g * interval '1 day' + interval '1 hour', %(t0)s, %(t0)s + g * interval '1 day',
                       CASE WHEN g = 89 THEN 'boom' END
                  FROM workflows w, generate_series(0, 89) g ORDER BY g, w.id
                """, {"t0": YEAR_START})
            conn.execute(
                """
                INSERT INTO attempts (tenant_id, workflow_id, run_id, number, status, queued_at, finished_at)
                SELECT tenant_id, workflow_id, id, 1, status, scheduled_for, finished_at FROM runs ORDER BY id
                """)
            conn.execute("""INSERT INTO attempt_steps (attempt_id, tenant_id, step, position, status, log)
                            SELECT id, tenant_id, 'load', 0, status, 'log' FROM attempts""")
            conn.execute("""INSERT INTO alerts (tenant_id, workflow_id, status, first_severity, severity, owner,
                                failure_count, cadence_seconds, escalation_multiplier, escalate_after, escalate_at,
                                first_failure_at, last_failure_at, last_run_id, opened_at)
                            SELECT tenant_id, workflow_id, 'open', 'warning', 'warning', 'engineering', 1, 86400,
                                   2, 3, scheduled_for, scheduled_for, scheduled_for, id, scheduled_for
                              FROM runs WHERE status = 'failed'""")
            before = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                      for t in ("runs", "attempt_steps", "alerts")}
            before["attempts"] = conn.execute(f"SELECT {ATTEMPT_COLUMNS} FROM attempts ORDER BY 1, 2").fetchall()
            # finished and not yet claimed by the poller (processed_at NULL): each goes to the outcome queue
            waiting = conn.execute("SELECT id, tenant_id, workflow_id, run_id, finished_at FROM attempts"
                                   " WHERE processed_at IS NULL AND finished_at IS NOT NULL ORDER BY id").fetchall()
            conn.commit()

            applied = migrate.upgrade(conn, YEAR_START)
            assert [m.version for m in applied] == [m.version for m in everything if m.version >= 23]

            assert conn.execute("SELECT relkind FROM pg_class WHERE oid = 'runs'::regclass").fetchone() == ("p",)
            parts = [r[0] for r in conn.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'runs'::regclass ORDER BY 1")]
            assert parts == ["runs_default", "runs_p202501", "runs_p202502", "runs_p202503"]
            # Every row is there with its id and values (the new partition-key columns aside).
            assert conn.execute("SELECT * FROM runs ORDER BY 1, 2").fetchall() == before["runs"]
            attempts = conn.execute(f"SELECT {ATTEMPT_COLUMNS} FROM attempts ORDER BY 1, 2").fetchall()
            assert attempts == before["attempts"]
            assert waiting and conn.execute(
                "SELECT attempt_id, tenant_id, workflow_id, run_id, finished_at FROM outcome_queue ORDER BY 1"
            ).fetchall() == waiting
            assert conn.execute("SELECT count(*) FROM outcome_queue q JOIN attempts a ON a.id = q.attempt_id"
                                " AND a.run_scheduled_for = q.run_scheduled_for").fetchone() == (len(waiting),)
            assert conn.execute("SELECT count(*) FROM attempts a JOIN runs r ON r.id = a.run_id"
                                " AND r.scheduled_for = a.run_scheduled_for").fetchone() == (len(before["attempts"]),)
            steps = conn.execute("SELECT attempt_id, tenant_id, step, position, status, started_at, finished_at, log,"
                                 " output, error FROM attempt_steps ORDER BY 1, 2").fetchall()
            assert steps == before["attempt_steps"]
            assert conn.execute("SELECT * FROM alerts ORDER BY 1, 2").fetchall() == before["alerts"]
            assert conn.execute("SELECT count(*) FROM runs_default").fetchone() == (0,)
            # Each workflow's newest success is noted beside the ledger: the failure count starts there.
            noted = conn.execute("SELECT workflow_id, run_id, scheduled_for, finished_at FROM workflow_successes"
                                 " ORDER BY 1").fetchall()
            assert noted == [r for r in conn.execute(
                "SELECT DISTINCT ON (workflow_id) workflow_id, id, scheduled_for, finished_at FROM runs"
                " WHERE status = 'succeeded' ORDER BY workflow_id, scheduled_for DESC").fetchall()]
            assert len(noted) == 2 and {r[2] for r in noted} == {YEAR_START + 88 * DAY}

            # Identity continues after the old ids; the one-run-per-tick rule holds on moved rows.
            last_run = max(r[0] for r in before["runs"])
            new_id = conn.execute("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget,"
                                  " deadline_at, created_at) SELECT tenant_id, id, %s, 'queued', 0, %s, %s"
                                  " FROM workflows ORDER BY id LIMIT 1 RETURNING id",
                                  (YEAR_START + 200 * DAY, YEAR_START, YEAR_START)).fetchone()[0]
            assert new_id == last_run + 1
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget,"
                             " deadline_at, created_at) SELECT tenant_id, workflow_id, scheduled_for, 'queued', 0,"
                             " deadline_at, created_at FROM runs ORDER BY id LIMIT 1")
            conn.rollback()
            # Deleting a run still takes its attempts and steps along.
            doomed = before["runs"][0][0]
            conn.execute("DELETE FROM runs WHERE id = %s", (doomed,))
            assert conn.execute("SELECT count(*) FROM attempts WHERE run_id = %s", (doomed,)).fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM attempt_steps s JOIN attempts a ON a.id = s.attempt_id"
                                " WHERE a.run_id = %s", (doomed,)).fetchone() == (0,)
            conn.rollback()
            # Row-level security is enabled and forced on every partition the migration made.
            forced = conn.execute(
                "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent IN ('runs'::regclass, 'attempts'::regclass, 'attempt_steps'::regclass)"
                " AND c.relrowsecurity AND c.relforcerowsecurity").fetchone()[0]
            assert forced == 3 * 4
            assert conn.execute("SELECT to_regclass('runs_unpartitioned')").fetchone() == (None,)
    finally:
        drop_schema(name)


def test_the_failure_count_reads_only_the_months_from_the_newest_success_on(db: Database) -> None:
    """Each workflow's newest success is kept beside the ledger by whatever statement writes it,
    so the streak's walk never opens the months before it."""
    wf = workflow(db, YEAR_START - DAY, tenant="acme", name="nightly", cadence=DAILY)
    sweeper = RetentionSweeper(db)
    sweeper.create_months(YEAR_START)
    sweeper.create_months(YEAR_START + 90 * DAY)
    assert months(db) == [f"runs_p2025{m:02d}" for m in range(1, 7)]
    poller = OutcomePoller(db, "p1")
    success_day = YEAR_START + 40 * DAY  # in February
    for index in range(120):  # January to April: succeeds until February, fails from then on
        day = YEAR_START + index * DAY
        run_tick(db, wf, day, index <= 40)
        poller.run_once(day + timedelta(minutes=5))

    # The worker's outcome wrote the row; the count is the streak since that success.
    (run_id, scheduled_for), = rows(db, "SELECT run_id, scheduled_for FROM workflow_successes WHERE workflow_id = %s",
                                    wf.id)
    assert scheduled_for == success_day
    assert rows(db, "SELECT status, scheduled_for FROM runs WHERE id = %s", run_id) == [("succeeded", success_day)]
    with db.transaction() as store:
        assert streak(store, wf.id) == 120 - 41
        assert store.monitoring.evaluation_inputs([wf.id])[0].success_run_id == run_id
        from tickwarden.store.queries import queries

        text = re.sub(r"%\(workflow_ids\)[sb]", "ARRAY[%(wf)s]", queries()["monitoring_evaluation_inputs"])
        no_rates = {"rate_cadences": [], "rate_overrides": [], "rate_windows": [], "rate_alert_afters": [],
                    "unscheduled": 86400}
        plan = store.conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text,
                                  {"wf": wf.id, **no_rates, "now": None}).fetchone()[0]
        # As the evaluation runs it, at its `now` (the last day), on the plan the server keeps.
        store.conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        bounded = store.conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text,
                                     {"wf": wf.id, **no_rates, "now": YEAR_START + 119 * DAY}).fetchone()[0]
    assert ledger_tables(plan, executed=True) == {f"runs_p2025{m:02d}" for m in range(2, 7)} | {"runs_default"}
    # Bounded by a day past now (April 30): May, which that day reaches, but neither June nor the
    # DEFAULT partition, which no run of this walk can be in.
    assert ledger_tables(bounded, executed=True) == {f"runs_p2025{m:02d}" for m in range(2, 6)}
    with db.transaction() as store:
        assert store.monitoring.evaluation_inputs([wf.id], now=YEAR_START + 119 * DAY)[0].failures == 120 - 41

    # A success written by any statement moves the row forward, never back.
    with db.transaction() as store:
        store.conn.execute(
            "INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget, deadline_at,"
            " created_at, finished_at) VALUES (%s, %s, %s, true, 'succeeded', 0, %s, %s, %s),"
            " (%s, %s, %s, true, 'succeeded', 0, %s, %s, %s)",
            (wf.tenant_id, wf.id, YEAR_START + 119 * DAY + timedelta(hours=1), YEAR_START + 120 * DAY,
             YEAR_START + 119 * DAY, YEAR_START + 119 * DAY,
             wf.tenant_id, wf.id, YEAR_START + 10 * DAY + timedelta(hours=1), YEAR_START + 120 * DAY,
             YEAR_START + 119 * DAY, YEAR_START + 119 * DAY))
        assert streak(store, wf.id) == 0
    assert rows(db, "SELECT scheduled_for FROM workflow_successes WHERE workflow_id = %s", wf.id) == [
        (YEAR_START + 119 * DAY + timedelta(hours=1),)]


def test_deciding_a_month_reads_none_of_it_when_every_workflow_succeeded_since(db: Database) -> None:
    """A month past every horizon whose workflows all succeeded after it is decided from
    workflow_successes alone: the month's own index is not probed for any workflow."""
    sweeper = RetentionSweeper(db)
    sweeper.create_months(YEAR_START)
    steady = workflow(db, YEAR_START - DAY, tenant="acme", name="steady", cadence=DAILY)
    broken = workflow(db, YEAR_START - DAY, tenant="acme", name="broken", cadence=DAILY)
    poller = OutcomePoller(db, "p1")
    for index in range(70):  # January to mid-March; the broken one never succeeds
        day = YEAR_START + index * DAY
        run_tick(db, steady, day, True)
        run_tick(db, broken, day, False)
        poller.run_once(day + timedelta(minutes=5))
    now = YEAR_START + 450 * DAY
    (january,) = [m for m in rows_of_months(db) if m.suffix == "p202501"]

    def decide() -> tuple[bool, set[str]]:
        from tickwarden.store.queries import queries

        params = {"lower": january.lower, "upper": january.upper, "now": now, "default_days": 400}
        with db.transaction() as store:
            keeps = store.conn.execute(queries()["retention_month_keeps"], params).fetchone()[0]
            plan = store.conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries()["retention_month_keeps"],
                                      params).fetchone()[0]
        probed: set[str] = set()

        def walk(node: dict) -> None:
            if node.get("Relation Name") == "runs_p202501" and "workflow" in node.get("Index Name", "") \
                    and node.get("Actual Loops", 0) > 0:
                probed.add(node["Index Name"])
            for child in node.get("Plans", []):
                walk(child)

        walk(plan[0]["Plan"])
        return keeps, probed

    # The broken workflow has no success: its runs are kept, and finding that probes the month.
    keeps, probed = decide()
    assert keeps and probed
    # Once it has succeeded since, the month is droppable and nothing of it is read.
    run_tick(db, broken, YEAR_START + 70 * DAY, True)
    keeps, probed = decide()
    assert not keeps and not probed, probed


def rows_of_months(db: Database) -> list:
    with db.transaction() as store:
        return store.retention.ledger_months()


def test_a_run_shown_by_id_reads_its_attempts_and_steps_in_its_month_alone(db: Database) -> None:
    """The run page and `GET /api/runs/{id}` find the run by id (every month's key probed),
    then read its attempts and steps in its month only: the run's tick is known by then."""
    from tickwarden.store.queries import queries

    wf = workflow(db, YEAR_START, cadence=DAILY)
    RetentionSweeper(db).create_months(YEAR_START)
    for index in (5, 40, 70):  # January, February, March
        run_tick(db, wf, YEAR_START + index * DAY, True)
    (run_id, tick), = rows(db, "SELECT id, scheduled_for FROM runs WHERE scheduled_for = %s", YEAR_START + 40 * DAY)

    def opened(name: str, params: dict[str, object]) -> set[str]:
        with db.transaction() as store:
            plan = store.conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries()[name], params).fetchone()[0]
        return ledger_tables(plan, executed=True)

    in_month = {"run_id": run_id, "scheduled_for": tick}
    assert opened("ledger_get_run_in_month", in_month) == {"runs_p202502"}
    assert opened("ledger_list_attempts_in_month", in_month) == {"attempts_p202502"}
    assert opened("api_list_run_steps_in_month", in_month) == {"attempts_p202502", "attempt_steps_p202502"}
    # By id alone every month is read (what the page did for its attempts and steps).
    assert {"attempts_p202501", "attempts_p202503"} <= opened("ledger_list_attempts", {"run_id": run_id})

    with db.transaction() as store:
        view = store.api.get_run(run_id)
        assert view is not None and view.run.scheduled_for == tick
        attempts = store.ledger.list_attempts(run_id, tick)
        assert attempts == store.ledger.list_attempts(run_id) and len(attempts) == 1
        steps = store.api.list_run_steps(run_id, tick)
        assert steps == store.api.list_run_steps(run_id) and [s.step for s in steps] == ["load"]
        assert store.ledger.get_run(run_id, tick) == store.ledger.get_run(run_id) == view.run
        assert store.ledger.get_run(run_id, YEAR_START) is None


def test_a_worker_reads_and_writes_only_its_runs_month_for_each_attempt(db: Database) -> None:
    """Every statement a worker sends per attempt (renew, start, finish, steps, give back) names
    the run's tick beside the attempt's id, so its plan holds that month's partitions alone,
    however many months retention keeps."""

    wf = workflow(db, YEAR_START, cadence=DAILY)
    RetentionSweeper(db).create_months(YEAR_START)
    for index in (5, 70):  # January and March hold finished runs
        run_tick(db, wf, YEAR_START + index * DAY, True)
    ticks = [YEAR_START + index * DAY for index in (40, 41, 42)]  # February
    for tick in ticks:
        create_tick(db, wf, tick, tick)
    now = ticks[-1] + timedelta(minutes=1)
    with db.autocommit() as store:
        running, ahead, spare = [a for a, _ in store.execution.exchange("w1", now, 600, lease=3).leased]
    assert running.started_at == now and ahead.started_at is None
    assert [a.run_scheduled_for for a in (running, ahead, spare)] == ticks

    def opened(name: str, params: dict[str, object]) -> set[str]:
        with db.transaction() as store:
            plan = store.conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text_of(name), params).fetchone()[0]
        return ledger_tables(plan)

    def key(attempt: Attempt) -> dict[str, object]:
        return {"attempt_id": attempt.id, "run_scheduled_for": attempt.run_scheduled_for, "worker_id": "w1",
                "now": now, "lease_expires_at": now + timedelta(minutes=10)}

    february = {"attempts_p202502", "runs_p202502"}
    assert opened("ledger_renew_lease", key(running)) == {"attempts_p202502"}
    assert opened(in_months("execution_start_attempt", [ahead.run_scheduled_for]), key(ahead)) == {"attempts_p202502"}
    step = {"attempt_id": running.id, "step": "load", "position": 0, "status": "succeeded", "log": "",
            "output": None, "error": None}
    finished = [(running, AttemptOutcome(status="succeeded"), now)]
    finish = finish_params("w1", finished, wake=False, steps=[step])
    assert opened(finish_text(finished), finish) == february
    # Each of the month's tables is touched once: the attempt's update, the run's (its verdict
    # decided there), and neither read again beside its write.
    with db.transaction() as store:
        plan = store.conn.execute("EXPLAIN (FORMAT JSON) " + finish_text(finished), finish).fetchone()[0]
    assert sorted(relation_nodes(plan)) == ["attempts_p202502", "runs_p202502"]
    assert opened("execution_release_attempts", {
        "attempt_ids": [spare.id], "run_scheduled_fors": [spare.run_scheduled_for], "worker_id": "w1"}) == february

    # Each statement did its work in that month.
    assert rows(db, "SELECT a.status, r.status FROM attempts a JOIN runs r ON r.id = a.run_id"
                    " WHERE a.run_scheduled_for >= %s ORDER BY a.run_scheduled_for", ticks[0]) == [
        ("succeeded", "succeeded"), ("running", "running"), ("queued", "queued"), ("succeeded", "succeeded")]
    assert rows(db, "SELECT attempt_id, step FROM attempt_steps WHERE run_scheduled_for = %s", ticks[0]) == [
        (running.id, "load")]
    assert rows(db, "SELECT started_at FROM attempts WHERE id = %s", ahead.id) == [(now,)]


def ledger_locks(conn: psycopg.Connection) -> set[str]:
    """The ledger's partitions this connection's transaction holds a lock on (of this test's schema)."""
    return {name for (name,) in conn.execute(
        "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
        " WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND c.relkind = 'r'"
        " AND c.relnamespace = current_schema()::regnamespace"
        " AND c.relname ~ '^(runs|attempts|attempt_steps)_'").fetchall()}


def _two_february_runs(db: Database) -> datetime:
    """A daily workflow's runs of two February ticks, on a ledger with the year's months; a minute after the second."""
    wf = workflow(db, YEAR_START, cadence=DAILY)
    RetentionSweeper(db).create_months(YEAR_START)
    ticks = [YEAR_START + index * DAY for index in (40, 41)]
    for tick in ticks:
        create_tick(db, wf, tick, tick)
    return ticks[-1] + timedelta(minutes=1)


def test_the_exchanges_start_and_outcome_lock_only_their_attempts_month(db: Database) -> None:
    """The exchange runs its statements as plans made once (`execution_generic_plans`). A plan
    pruned only when it starts (the month bound as a parameter) locks every month's partitions
    at each execution first; the start and the outcome name their attempt's month as constants,
    so their plan, made once, holds and locks February's partitions alone."""
    from tickwarden.store.execution import _start

    now = _two_february_runs(db)
    with db.autocommit() as store:
        running, ahead = [a for a, _ in store.execution.exchange("w1", now, 600, lease=2).leased]
    finished = [(running, AttemptOutcome(status="succeeded"), now)]
    statements = [_start(ahead, "w1", now, 600), (finish_text(finished), finish_params("w1", finished, wake=False))]
    with db.transaction() as store:
        assert len(rows(db, "SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                            " WHERE c.relnamespace = current_schema()::regnamespace"
                            " AND c.relname ~ '^attempts_p'")) > 3  # months besides February's
        store.conn.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
        assert ledger_locks(store.conn) == set()
        for text, params in statements:
            assert store.conn.execute(text, params, prepare=True).fetchall()
        assert ledger_locks(store.conn) == {"attempts_p202502", "runs_p202502"}
        for marker in ("SET started_at", "WITH reported AS"):  # both ran their one generic plan
            assert store.conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                                      " WHERE strpos(statement, %s) > 0", [marker]).fetchall() == [(1, 0)]
    assert rows(db, "SELECT status, started_at FROM attempts WHERE id = ANY (%s) ORDER BY id",
                [running.id, ahead.id]) == [("succeeded", now), ("running", now)]


def attempt_scans(plan: list[dict]) -> list[tuple[str, str | None]]:
    """(node type, index name) of each node of a JSON plan that reads a partition of the attempts."""
    found: list[tuple[str, str | None]] = []

    def walk(node: dict) -> None:
        if node.get("Relation Name", "").startswith("attempts_") and node["Node Type"] != "ModifyTable":
            found.append((node["Node Type"], node.get("Index Name")))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return found


def test_one_outcome_finds_its_attempt_by_its_key(db: Database) -> None:
    """The worker's outcome (one attempt), its lease's renewal and the start of an attempt leased
    ahead find their attempt by one probe of its month's primary key, in the plan made once per
    connection: not by reading the running attempts' partial lease index, whose
    entries (one a lease and one a start, dead ones kept until a VACUUM) grow with every attempt.
    The plan is made here as a worker's first outcome makes it, with the month's partition
    nearly empty (where the lease index tied with the key and was chosen); a batch keeps its
    own text. A second delivery still changes nothing (the compare-and-set on running)."""
    now = _two_february_runs(db)
    with db.autocommit() as store:
        running, _ = [a for a, _ in store.execution.exchange("w1", now, 600, lease=2).leased]
    finished = [(running, AttemptOutcome(status="succeeded"), now)]
    params = finish_params("w1", finished, wake=False)
    key = {"attempt_id": running.id, "run_scheduled_for": running.run_scheduled_for, "worker_id": "w1", "now": now,
           "lease_expires_at": now + timedelta(minutes=10)}
    for text, given in [(finish_text(finished), params), (text_of("ledger_renew_lease"), key),
                        (in_months("execution_start_attempt", [running.run_scheduled_for]), key)]:
        with db.transaction() as store:
            scans = attempt_scans(generic_plan(store.conn, text, given))
        assert scans == [("Index Scan", "attempts_p202502_pkey")], text
    with db.transaction() as store:
        applied = store.conn.execute(finish_text(finished), params, prepare=True).fetchall()
        again = store.conn.execute(finish_text(finished), params, prepare=True).fetchall()
    assert [(r[0], r[3]) for r in applied] == [(running.id, "succeeded")] and again == []
    assert rows(db, "SELECT status FROM attempts WHERE id = %s", running.id) == [("succeeded",)]
    assert finish_text(finished * 2) != finish_text(finished)  # a batch reads its array


def queued_in_february(db: Database) -> tuple[Workflow, list[datetime]]:
    """A daily workflow with every month's partitions: finished runs in January and March, two
    ticks queued in February (returned), so a plan that holds February's partitions alone was
    told its months."""
    wf = workflow(db, YEAR_START, cadence=DAILY)
    RetentionSweeper(db).create_months(YEAR_START)
    for index in (5, 70):
        run_tick(db, wf, YEAR_START + index * DAY, True)
    ticks = [YEAR_START + index * DAY for index in (40, 41)]
    for tick in ticks:
        create_tick(db, wf, tick, tick)
    return wf, ticks


def test_a_lease_writes_only_the_months_of_the_attempts_it_locked(db: Database) -> None:
    """The lease's queue scan and the idle poll read the queue (attempt_queue), no month of the
    ledger; the writes are told the locked attempts' ticks inside the server (the scan's settings),
    and their plan, made once (generic, as the worker's exchange runs it) or afresh, starts with
    those months' partitions alone; the contexts behind them read no month at all."""
    from tickwarden.store.ledger import lease_statements
    from tickwarden.store.queries import queries

    wf, ticks = queued_in_february(db)
    now = ticks[-1] + timedelta(minutes=1)

    for generic in (True, False):
        with db.transaction() as store:
            (lock, params), (write, _) = lease_statements("w1", now, 600, 2, start=1)
            for name in (lock, "execution_queue_waiting"):
                plan = store.conn.execute("EXPLAIN (FORMAT JSON) " + queries()[name], params).fetchone()[0]
                assert ledger_tables(plan) == set()
            queued = store.conn.execute(queries()[lock], params).fetchall()
            assert [tick for _, _, tick, _ in queued] == ticks
            if generic:
                store.conn.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
            plan = store.conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries()[write], params).fetchone()[0]
            assert ledger_tables(plan) == {"attempts_p202502", "runs_p202502"}, generic
            # The runs are read once, by their update, which also gives each run's manual flag: a read
            # of its own was a third partitioned relation to plan at every lease.
            assert relation_nodes(plan).count("runs_p202502") == 1, relation_nodes(plan)
            contexts = store.conn.execute("EXPLAIN (FORMAT JSON) " + queries()["execution_contexts"],
                                          {"workflow_ids": None}).fetchone()[0]
            assert ledger_tables(contexts) == set()
            [(workflow_ids,)] = store.conn.execute(
                "SELECT current_setting('tickwarden.lease_workflows')::bigint[]").fetchall()
            assert workflow_ids == [wf.id, wf.id]
            if generic:  # EXPLAIN ANALYZE ran the writes: undone for the second round
                raise psycopg.Rollback()

    # The writes leased what the scan locked: the first started now, the other leased ahead.
    assert rows(db, "SELECT a.status, a.worker_id, a.started_at, r.status FROM attempts a JOIN runs r"
                    " ON r.id = a.run_id AND r.scheduled_for = a.run_scheduled_for"
                    " WHERE a.run_scheduled_for = ANY (%s) ORDER BY a.run_scheduled_for", ticks) == [
        ("running", "w1", now, "running"), ("running", "w1", None, "running")]


def test_a_reaper_pass_writes_only_the_months_of_the_leases_it_locked(db: Database) -> None:
    """The reaper's look for expired leases alone scans every month; its writes (a started
    attempt lost, one leased ahead given back, their runs moved) are planned with the locked
    attempts' ticks bound, so their plan holds those months' partitions alone."""
    from tickwarden.reaper import LeaseReaper
    from tickwarden.store.ledger import expire_params
    from tickwarden.store.queries import queries

    wf, ticks = queued_in_february(db)
    leased_at = ticks[-1] + timedelta(minutes=1)
    with db.autocommit() as store:
        started, ahead = [a for a, _ in store.execution.exchange("w1", leased_at, 60, lease=2).leased]
    assert started.started_at == leased_at and ahead.started_at is None
    now = leased_at + timedelta(minutes=5)

    with db.transaction() as store:
        expired = store.conn.execute(queries()["ledger_lock_expired_leases"], {"now": now, "limit": 10}).fetchall()
        assert sorted((i, a) for i, _, a in expired) == [(started.id, False), (ahead.id, True)]
        bound = expire_params(now, [{"id": i, "run_scheduled_for": t, "ahead": a} for i, t, a in expired])
        plan = store.conn.execute("EXPLAIN (FORMAT JSON) " + queries()["ledger_expire_leases"], bound).fetchone()[0]
        assert ledger_tables(plan) == {"attempts_p202502", "runs_p202502"}

    reaper = LeaseReaper(db)
    reaper.run_once(now)
    assert [r.attempt_id for r in reaper.last_reaped] == [started.id] and reaper.last_requeued == [ahead.id]
    assert rows(db, "SELECT a.id, a.status, r.status FROM attempts a JOIN runs r"
                    " ON r.id = a.run_id AND r.scheduled_for = a.run_scheduled_for"
                    " WHERE a.run_scheduled_for = ANY (%s) ORDER BY a.id", ticks) == [
        (started.id, "lost", "pending_retry"), (ahead.id, "queued", "queued")]


def test_a_reaper_pass_in_one_statement_writes_only_the_recent_months_and_takes_older_leases_after(
        db: Database) -> None:
    """The pass's one statement (`reap_text`) locks expired leases in every month, and its writes
    are planned with the month of `now` and the one before as constants, so they hold those
    months' partitions alone (kept plan or fresh). A lease of an older month is locked by it, left
    to the lock and the bound writes after it, in the same pass: lost (or given back) all the same."""
    from tickwarden.reaper import LeaseReaper
    from tickwarden.store.ledger import FREE_LOST_REQUEUES, recent_months, reap_text

    wf = workflow(db, YEAR_START, cadence=DAILY)
    RetentionSweeper(db).create_months(YEAR_START)
    old, recent = YEAR_START + 5 * DAY, YEAR_START + 70 * DAY  # January; March
    for tick in (old, recent):
        create_tick(db, wf, tick, tick)
    leased_at = recent + timedelta(minutes=1)
    with db.autocommit() as store:
        leased = [a for a, _ in store.execution.exchange("w1", leased_at, 60, lease=2).leased]
    assert sorted(a.run_scheduled_for for a in leased) == [old, recent]
    now = leased_at + timedelta(minutes=5)
    assert recent_months(now) == ((2025, 2), (2025, 3))

    def outside_locked(node: dict, inside: bool = False) -> set[str]:
        inside = inside or node.get("Subplan Name") == "CTE locked"
        name = node.get("Relation Name", "")
        found = {name} if name.startswith(("runs_", "attempts_")) and not inside else set()
        for child in node.get("Plans", []):
            found |= outside_locked(child, inside)
        return found

    params = {"now": now, "limit": 10, "free_requeues": FREE_LOST_REQUEUES}
    with db.transaction() as store:
        plan = generic_plan(store.conn, reap_text(recent_months(now)), params)
        assert outside_locked(plan[0]["Plan"]) == {"attempts_p202502", "attempts_p202503", "runs_p202502",
                                                   "runs_p202503"}
        assert {"attempts_p202501", "attempts_default"} <= ledger_tables(plan), sorted(ledger_tables(plan))  # the lock: all

    reaper = LeaseReaper(db)
    reaper.run_once(now)
    assert sorted(r.attempt_id for r in reaper.last_reaped) == sorted(a.id for a in leased if a.started_at)
    assert sorted(reaper.last_requeued) == sorted(a.id for a in leased if not a.started_at)
    assert rows(db, "SELECT count(*) FROM attempts WHERE status = 'running'") == [(0,)]


def test_a_retry_is_launched_in_its_runs_month_alone(db: Database) -> None:
    """The poller hands the retry engine each run with its tick, so the statements that
    fail an unretryable run and queue the next attempt plan that month's partitions alone,
    however many months retention keeps, in a fresh plan and in the one the server keeps
    for their text (the month is a constant of it); the retry is launched there."""
    from tests.integration.pipeline import attempt_once, fail

    wf = workflow(db, YEAR_START, cadence=DAILY)
    RetentionSweeper(db).create_months(YEAR_START)
    for index in (5, 70):  # January and March hold finished runs
        run_tick(db, wf, YEAR_START + index * DAY, True)
    tick = YEAR_START + 40 * DAY  # February
    run = create_tick(db, wf, tick, tick)
    attempt_once(db, run, fail("connection"), tick + timedelta(minutes=1))
    now = tick + timedelta(minutes=2)
    params = {"run_ids": [run.id], "run_scheduled_fors": [tick], "now": now, "patient": ["connection"],
              "categories": ["config"]}

    def planned(name: str) -> set[str]:
        with db.transaction() as store:
            return ledger_tables(store.conn.execute("EXPLAIN (FORMAT JSON) " + in_months(name, [tick]),
                                                    params).fetchone()[0])

    def kept(name: str) -> set[str]:
        """The partitions of the plan the server keeps for the statement's text (its generic plan)."""
        with db.transaction() as store:
            return ledger_tables(generic_plan(store.conn, in_months(name, [tick]), params))

    assert len(months(db)) >= 3
    assert planned("ledger_queue_retries") == {"runs_p202502", "attempts_p202502"}
    assert planned("monitoring_fail_unretryable") == {"runs_p202502"}
    # The months are constants of the text: a plan made once and kept prunes as a fresh one does.
    assert kept("ledger_queue_retries") == {"runs_p202502", "attempts_p202502"}
    assert kept("monitoring_fail_unretryable") == {"runs_p202502"}

    result = OutcomePoller(db, "p1").poll(now)
    assert result.retried == [run.id]  # (the January outcome is claimed beside it)
    assert rows(db, "SELECT number, status FROM attempts_p202502 WHERE run_id = %s ORDER BY number", run.id) == [
        (1, "failed"), (2, "queued")]
    assert rows(db, "SELECT status, attempts_count FROM runs_p202502 WHERE id = %s", run.id) == [("queued", 2)]


def test_a_cronjobs_pod_leases_its_tick_in_that_month_alone(db: Database) -> None:
    """The pod a workflow's CronJob starts leases its tick's attempt by workflow and tick: the
    tick is the partition key, so the plan holds that month's partitions and no other."""

    from tickwarden.store.queries import queries

    wf = workflow(db, YEAR_START, cadence=DAILY)
    RetentionSweeper(db).create_months(YEAR_START)
    for index in (5, 70):  # January and March hold finished runs
        run_tick(db, wf, YEAR_START + index * DAY, True)
    tick = YEAR_START + 40 * DAY  # February
    create_tick(db, wf, tick, tick)
    now = tick + timedelta(seconds=5)
    params = {"workflow_id": wf.id, "scheduled_for": tick, "worker_id": "pod-1", "now": now,
              "lease_expires_at": now + timedelta(minutes=1)}
    with db.transaction() as store:
        plan = store.conn.execute("EXPLAIN (FORMAT JSON) " + queries()["kubernetes_lease_tick_attempt"],
                                  params).fetchone()[0]
    assert ledger_tables(plan) == {"attempts_p202502", "runs_p202502"}

    with db.transaction() as store:
        leased = store.kubernetes.lease_tick_attempt(wf.id, tick, "pod-1", now, 60)
        assert leased is not None and leased.run_scheduled_for == tick and leased.worker_id == "pod-1"
        # A CronJob that fired twice: the second pod finds nothing left to lease.
        assert store.kubernetes.lease_tick_attempt(wf.id, tick, "pod-2", now, 60) is None
    assert rows(db, "SELECT a.status, r.status, r.started_at = %s FROM attempts a JOIN runs r ON r.id = a.run_id"
                    " WHERE r.scheduled_for = %s", now, tick) == [("running", "running", True)]


def test_a_worker_pool_runs_the_exchange_generic_with_one_statement_fewer(db: Database, schema: str) -> None:
    """A pool made for a worker process (`generic_plans=True`) starts its sessions with generic plans:
    the exchange sends no setting for them, and its outcome still runs the plan made once, locking
    its month alone; the other pools keep the server's default."""
    sent: list[str] = []
    now = _two_february_runs(db)
    with Database(TEST_URL, schema=schema, min_size=1, max_size=1, generic_plans=True) as worker_db:
        with worker_db.connection() as conn:
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
        with worker_db.autocommit() as store:
            real = store.execution._exchange

            def exchange(statements, **shape):  # type: ignore[no-untyped-def]
                sent.extend(name for name, _ in statements)
                return real(statements, **shape)

            store.execution._exchange = exchange  # type: ignore[method-assign]
            running, ahead = [a for a, _ in store.execution.exchange("w1", now, 600, lease=2).leased]
            exchanged = store.execution.exchange("w1", now, 600, attempt=running,
                                                 outcome=AttemptOutcome(status="succeeded"), start=ahead)
            assert exchanged.finished is not None and exchanged.finished.applied and exchanged.started
            assert store.conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                                      " WHERE strpos(statement, 'WITH reported AS') > 0").fetchall() == [(1, 0)]
    assert "execution_generic_plans" not in sent and "execution_begin" in sent
    with db.connection() as conn:
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
