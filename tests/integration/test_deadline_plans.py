"""The deadline pass's statements under the plans the server caches for them (see test_evaluation_plans).

On a small fleet the server's estimates favour reading a whole table over probing a few of
its rows: these check that a pass reads only the rows it acts on.
"""

from datetime import datetime, timedelta

import pytest

from tests.integration.test_evaluation_plans import _generic_plan, _scans_of
from tickwarden.db import Database
from tickwarden.store.monitoring import advance_text

FLEET = 1000
AT = datetime(2026, 3, 1)


def _read(plan: dict, relation: str) -> int:
    """Rows of `relation` the plan read: those its scans returned and those their filters removed."""
    return sum((s["Actual Rows"] + s.get("Rows Removed by Filter", 0)) * s["Actual Loops"]
               for s in _scans_of(plan, relation))


def _fleet(conn) -> None:
    """FLEET active schedules, each with its watermark armed and none listed for arming."""
    conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'acme', %s)", (AT,))
    conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                 " SELECT 1, 'wf-' || w, %s, %s FROM generate_series(1, %s) w", (AT, AT, FLEET))
    conn.execute("INSERT INTO schedules (tenant_id, workflow_id, cron, status, cadence_seconds, version, created_at,"
                 " updated_at) SELECT 1, id, '*/5 * * * *', 'active', 300, 1, %s, %s FROM workflows", (AT, AT))
    conn.execute("INSERT INTO tick_audits (schedule_id, schedule_version, checked_until, next_check_at, updated_at)"
                 " SELECT id, 1, %s, %s + (id %% 5) * interval '1 minute', %s FROM schedules", (AT, AT, AT))
    conn.execute("DELETE FROM tick_audit_arms")
    conn.execute("ANALYZE workflows, schedules, tick_audits, tick_audit_arms")


def _open_runs(conn, workflows: int, deadline: datetime) -> None:
    """A queued run at AT of each of the first `workflows` workflows, all with one deadline."""
    conn.execute("INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,"
                 " attempts_count, deadline_at, created_at)"
                 " SELECT 1, id, %s, false, 'queued', 0, 0, %s, %s FROM workflows WHERE id <= %s",
                 (AT, deadline, AT, workflows))
    conn.execute("ANALYZE runs")


def _pass_plan(conn, limit: int, audit_limit: int) -> dict:
    """The deadline pass's statement at AT + 1 hour, under its generic plan."""
    return _generic_plan(
        conn, "monitoring_lock_overdue_and_arm",
        {"now": "timestamptz", "limit": "integer", "lookback_start": "timestamptz", "audit_limit": "integer"},
        {"now": AT + timedelta(hours=1), "limit": limit, "lookback_start": AT - timedelta(days=1),
         "audit_limit": audit_limit})


def test_a_pass_with_no_schedule_written_since_the_last_reads_no_schedule_to_arm(db: Database) -> None:
    with db.connection() as conn:
        _fleet(conn)
        plan = _pass_plan(conn, 500, 0)  # the arming alone: taking the due watermarks reads them, of course
        assert _read(plan, "schedules") == 0, plan
        assert _read(plan, "tick_audits") == 0, plan


@pytest.mark.parametrize("statement", ["monitoring_record_missed_and_advance", advance_text()],
                         ids=["with-missed-ticks", "advance-only"])
def test_advancing_a_pass_s_watermarks_reads_only_those_watermarks(db: Database, statement: str) -> None:
    """With ticks to record or without (the update alone, `advance_text`): a probe of each watermark moved."""
    advanced = [7, 70, 700, 701, 999]
    with db.connection() as conn:
        _fleet(conn)
        then = AT + timedelta(minutes=10)
        plan = _generic_plan(
            conn, statement,
            {"tenant_ids": "bigint[]", "workflow_ids": "bigint[]", "scheduled_fors": "timestamptz[]",
             "schedule_ids": "bigint[]", "checked_untils": "timestamptz[]", "next_check_ats": "timestamptz[]",
             "error": "text", "now": "timestamptz"},
            {"tenant_ids": [], "workflow_ids": [], "scheduled_fors": [], "schedule_ids": advanced,
             "checked_untils": [then] * len(advanced), "next_check_ats": [then + timedelta(minutes=5)] * len(advanced),
             "error": "never ran", "now": then})
        assert _read(plan, "tick_audits") == len(advanced), plan
        assert bool(_writes(plan, "runs")) == (statement == "monitoring_record_missed_and_advance"), plan
        moved = conn.execute("SELECT count(*) FROM tick_audits WHERE checked_until = %s", (then,)).fetchone()[0]
        assert moved == len(advanced)


def _writes(plan: dict, table: str) -> list[dict]:
    """The plan's writes (ModifyTable nodes) of `table`."""
    found = [plan] if plan.get("Node Type") == "ModifyTable" and plan.get("Relation Name") == table else []
    for child in plan.get("Plans", []):
        found += _writes(child, table)
    return found


def test_a_pass_with_nothing_overdue_reads_no_open_run_and_each_taken_watermark_s_schedule_once(db: Database) -> None:
    taken = 500
    with db.connection() as conn:
        _fleet(conn)
        _open_runs(conn, 50, AT + timedelta(hours=2))  # none past its deadline at the pass
        plan = _pass_plan(conn, 500, taken)
        # the closing of overdue runs is no part of the pass's every statement (`monitoring_close_overdue`,
        # sent only when runs are overdue): no write of runs or attempts is set up at every pass
        assert not _writes(plan, "runs") and not _writes(plan, "attempts"), plan
        # the columns of the watermarks taken, read once each: the due ones are not joined to them first
        assert _read(plan, "schedules") == taken, plan
        assert _read(plan, "workflows") == taken, plan


def test_at_the_top_of_the_hour_a_pass_reads_as_many_tied_runs_and_watermarks_as_it_takes(db: Database) -> None:
    """Every run of one tick past one deadline, every watermark due at one instant: the pass takes
    `limit` of each in its order (deadline then id, next check then schedule) straight from
    their indexes, where an index of the first key alone had it read and sort all of them."""
    limit = 100
    with db.connection() as conn:
        _fleet(conn)
        conn.execute("UPDATE tick_audits SET next_check_at = %s", (AT,))
        conn.execute("ANALYZE tick_audits")
        _open_runs(conn, FLEET, AT + timedelta(minutes=10))
        plan = _pass_plan(conn, limit, limit)
        months = [row[0] for row in conn.execute("SELECT inhrelid::regclass::text FROM pg_inherits"
                                                 " WHERE inhparent = 'runs'::regclass")]
        assert sum(_read(plan, month) for month in months) == limit, plan
        assert _read(plan, "tick_audits") == limit, plan
