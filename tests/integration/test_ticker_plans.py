"""The ticker's statement under the plans the server caches for it (see test_evaluation_plans)."""

import re
from datetime import datetime, timedelta

import pytest
from psycopg import sql

from tests.integration.test_deadline_plans import _read
from tickwarden.db import Database
from tickwarden.store.ledger import COUNTED, TickGroup, _create_tick_runs, tick_params
from tickwarden.store.trigger import Advance

FLEET = 1000
AT = datetime(2026, 3, 1)
TYPES = {"workflow_ids": "text[]", "tenant_ids": "text[]", "retry_budgets": "integer[]", "retry_backoffs": "text[]",
         "first_attempts": "integer[]", "tick_groups": "bigint[]", "scheduled_fors": "timestamptz[]",
         "deadlines": "timestamptz[]", "advance_ids": "text[]", "advance_next": "timestamptz[]",
         "advance_last": "timestamptz[]", "now": "timestamptz"}


def _fleet(conn, size: int) -> None:
    """`size` hourly schedules, each with its fire row."""
    conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'acme', %s)", (AT,))
    conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                 " SELECT 1, 'wf-' || w, %s, %s FROM generate_series(1, %s) w", (AT, AT, size))
    conn.execute("INSERT INTO schedules (tenant_id, workflow_id, cron, status, cadence_seconds, version,"
                 " created_at, updated_at) SELECT 1, id, '0 * * * *', 'active', 3600, 1, %s, %s FROM workflows",
                 (AT, AT))
    conn.execute("INSERT INTO schedule_fires (schedule_id, tenant_id, workflow_id, next_fire_at)"
                 " SELECT id, tenant_id, workflow_id, %s FROM schedules", (AT,))
    conn.execute("ANALYZE workflows, schedules, schedule_fires")


def _explain(conn, params: dict, mode: str) -> dict:
    """EXPLAIN ANALYZE of the ticker's statement, prepared, under `plan_cache_mode` = `mode`."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)[sb]", number, _create_tick_runs(COUNTED, exclusive=True)).replace("%%", "%")
    conn.execute(f"PREPARE checked ({', '.join(TYPES[n] for n in names)}) AS {text}")
    conn.execute(sql.SQL("SET LOCAL plan_cache_mode = {}").format(sql.Literal(mode)))
    arguments = sql.SQL(", ").join(sql.SQL("{}::{}").format(sql.Literal(params[n]), sql.SQL(TYPES[n]))
                                   for n in names)
    return conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE checked ({})").format(arguments)
                        ).fetchone()[0][0]["Plan"]


def _nodes(plan: dict) -> list[dict]:
    return [plan, *(node for child in plan.get("Plans", []) for node in _nodes(child))]


def test_a_pass_moves_only_the_fire_rows_of_the_schedules_it_claimed(db: Database) -> None:
    """The generic plan probes the advanced schedules' fire rows: a small fleet's are not all read into a hash."""
    with db.connection() as conn:
        _fleet(conn, FLEET)
        following = AT + timedelta(hours=1)
        advances = [Advance("{3,30,300}", following, None), Advance("{301,999}", following, AT)]
        plan = _explain(conn, tick_params([], AT, advances), "force_generic_plan")
        assert _read(plan, "schedule_fires") == 5, plan
        moved = conn.execute("SELECT count(*) FROM schedule_fires WHERE next_fire_at = %s", (following,)).fetchone()[0]
        assert moved == 5


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_the_rows_a_pass_moves_do_not_each_carry_their_groups_list_of_schedules(db: Database, mode: str) -> None:
    """Two groups of 2,000 (two expressions due at one minute): the advance's rows are a schedule
    and its times. Were the groups a FROM item of the UPDATE, each group's whole row (its list of
    ids as text included) would ride on each of its members' rows for the update's row marks: a
    hash of those rows holds members × list length bytes, and spills to disk at a few thousand."""
    size, group = 4000, 2000
    with db.connection() as conn:
        _fleet(conn, size)
        following = AT + timedelta(hours=1)
        members = [",".join(str(i) for i in range(first, first + group)) for first in (1, group + 1)]
        groups = [TickGroup("{" + ids + "}", "{" + ",".join("1" for _ in range(group)) + "}", ((AT, following),), 0)
                  for ids in members]
        advances = [Advance("{" + ids + "}", following, AT) for ids in members]
        plan = _explain(conn, tick_params(groups, AT, advances), mode)
        # the hash of 4,000 rows of a schedule id and two instants fits in work_mem many times over;
        # each with its group's list of 2,000 ids, it is some 40 MB and goes to temporary files
        spilled = [(n["Node Type"], n["Temp Written Blocks"]) for n in _nodes(plan) if n["Temp Written Blocks"]]
        assert not spilled, spilled
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == size
        moved = conn.execute("SELECT count(*) FROM schedule_fires WHERE next_fire_at = %s", (following,)).fetchone()[0]
        assert moved == size
