"""The ticker's statement under the plan the server caches for it (see test_evaluation_plans)."""

import re
from datetime import datetime, timedelta

from psycopg import sql

from tests.integration.test_deadline_plans import _read
from tickwarden.db import Database
from tickwarden.store.ledger import COUNTED, _create_tick_runs, tick_params
from tickwarden.store.trigger import Advance

FLEET = 1000
AT = datetime(2026, 3, 1)
TYPES = {"workflow_ids": "text[]", "tenant_ids": "text[]", "retry_budgets": "integer[]", "retry_backoffs": "text[]",
         "first_attempts": "integer[]", "tick_groups": "bigint[]", "scheduled_fors": "timestamptz[]",
         "deadlines": "timestamptz[]", "advance_ids": "text[]", "advance_next": "timestamptz[]",
         "advance_last": "timestamptz[]", "now": "timestamptz"}


def test_a_pass_moves_only_the_fire_rows_of_the_schedules_it_claimed(db: Database) -> None:
    """The generic plan probes the advanced schedules' fire rows: a small fleet's are not all read into a hash."""
    with db.connection() as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'acme', %s)", (AT,))
        conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                     " SELECT 1, 'wf-' || w, %s, %s FROM generate_series(1, %s) w", (AT, AT, FLEET))
        conn.execute("INSERT INTO schedules (tenant_id, workflow_id, cron, status, cadence_seconds, version,"
                     " created_at, updated_at) SELECT 1, id, '0 * * * *', 'active', 3600, 1, %s, %s FROM workflows",
                     (AT, AT))
        conn.execute("INSERT INTO schedule_fires (schedule_id, tenant_id, workflow_id, next_fire_at)"
                     " SELECT id, tenant_id, workflow_id, %s FROM schedules", (AT,))
        conn.execute("ANALYZE schedules, schedule_fires")
        following = AT + timedelta(hours=1)
        advances = [Advance("{3,30,300}", following, None), Advance("{301,999}", following, AT)]
        params = tick_params([], AT, advances)
        names: list[str] = []

        def number(match: re.Match) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        text = re.sub(r"%\((\w+)\)[sb]", number, _create_tick_runs(COUNTED, exclusive=True)).replace("%%", "%")
        conn.execute(f"PREPARE checked ({', '.join(TYPES[n] for n in names)}) AS {text}")
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        arguments = sql.SQL(", ").join(sql.SQL("{}::{}").format(sql.Literal(params[n]), sql.SQL(TYPES[n]))
                                       for n in names)
        plan = conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE checked ({})").format(arguments)
                            ).fetchone()[0][0]["Plan"]
        assert _read(plan, "schedule_fires") == 5, plan
        moved = conn.execute("SELECT count(*) FROM schedule_fires WHERE next_fire_at = %s", (following,)).fetchone()[0]
        assert moved == 5
