"""The evaluation's statements under the plans the server caches for them.

psycopg prepares a statement from its fifth execution on, and the server then runs the
generic plan it caches whenever that plan's estimate is no worse than a custom one's:
what the poller runs on a busy ledger is the generic plan, so that is the plan checked.
"""

import re
from datetime import UTC, datetime, timedelta

from psycopg import sql

from tickwarden.db import Database
from tickwarden.store.ledger import recent_months
from tickwarden.store.monitoring import claim_text
from tickwarden.store.queries import queries

OPEN_ALERTS = 300
# monitoring_evaluation_inputs' parameters beside the workflows: one profile with a rate rule listed
INPUT_TYPES = {"workflow_ids": "bigint[]", "rate_cadences": "integer[]", "rate_overrides": "text[]",
               "rate_windows": "integer[]", "rate_alert_afters": "integer[]", "unscheduled": "integer",
               "now": "timestamptz"}
RATE_PROFILE = {"rate_cadences": [3600], "rate_overrides": ["{}"], "rate_windows": [8], "rate_alert_afters": [2],
                "unscheduled": 86400, "now": "2026-03-01T00:00:00Z"}


def _scans_of(plan: dict, relation: str) -> list[dict]:
    found = [plan] if plan.get("Relation Name") == relation else []
    for child in plan.get("Plans", []):
        found += _scans_of(child, relation)
    return found


def _index_of(scan: dict) -> str | None:
    """The index a scan reads: its own, or its bitmap's."""
    if scan["Node Type"] == "Bitmap Heap Scan":
        [bitmap] = scan["Plans"]
        return bitmap.get("Index Name")
    return scan.get("Index Name")


def _generic_plan(conn, name: str, types: dict[str, str], args: dict[str, object]) -> dict:
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    named = name if " " in name else queries()[name]  # a query's name, or a text completed by its caller
    text = re.sub(r"%\((\w+)\)[sb]", number, named).replace("%%", "%")
    conn.execute(f"PREPARE checked ({', '.join(types[n] for n in names)}) AS {text}")
    conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    # EXECUTE takes no bound parameters: its arguments are literals
    arguments = sql.SQL(", ").join(sql.SQL("{}::{}").format(sql.Literal(args[n]), sql.SQL(types[n])) for n in names)
    explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE checked ({})").format(arguments)
    return conn.execute(explain).fetchone()[0][0]["Plan"]


def test_the_evaluation_reads_only_the_open_alerts_of_the_workflows_it_evaluates(db: Database) -> None:
    """Its generic plan probes each evaluated workflow's open alert: a fleet's open alerts are
    not each compared with each workflow of the batch."""
    at = datetime(2026, 3, 1)
    with db.connection() as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'acme', %s)", (at,))
        conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                     " SELECT 1, 'wf-' || w, %s, %s FROM generate_series(1, %s) w", (at, at, OPEN_ALERTS))
        conn.execute(
            """INSERT INTO alerts (tenant_id, workflow_id, status, first_severity, severity, owner, failure_count,
                                   cadence_seconds, escalation_multiplier, escalate_after, escalate_at,
                                   first_failure_at, last_failure_at, opened_at)
               SELECT 1, id, 'open', 'warning', 'warning', 'customer', 3, 3600, 3, 6, %(at)s, %(at)s, %(at)s, %(at)s
                 FROM workflows""", {"at": at})
        conn.execute("ANALYZE workflows, alerts, schedules, workflow_successes")
        evaluated = [5, 50, 150, 250]
        plan = _generic_plan(conn, "monitoring_evaluation_inputs", INPUT_TYPES,
                             {"workflow_ids": evaluated, **RATE_PROFILE})
        scans = _scans_of(plan, "alerts")
        assert scans
        read = sum(s["Actual Rows"] * s["Actual Loops"] for s in scans)
        assert read == len(evaluated), plan


def test_the_evaluation_reads_only_the_schedules_and_successes_of_the_workflows_it_evaluates(db: Database) -> None:
    """Its generic plan probes each evaluated workflow's schedule and newest success by key: the
    fleet's schedules and successes are not read into hashes for a batch of a few workflows."""
    at = datetime(2026, 3, 1)
    with db.connection() as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'acme', %s)", (at,))
        conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                     " SELECT 1, 'wf-' || w, %s, %s FROM generate_series(1, %s) w", (at, at, OPEN_ALERTS))
        conn.execute("INSERT INTO schedules (tenant_id, workflow_id, cron, status, cadence_seconds, created_at,"
                     " updated_at) SELECT 1, id, '0 * * * *', 'active', 3600, %(at)s, %(at)s FROM workflows",
                     {"at": at})
        conn.execute("INSERT INTO workflow_successes (workflow_id, tenant_id, run_id, scheduled_for, finished_at)"
                     " SELECT id, 1, id, %(at)s, %(at)s FROM workflows", {"at": at})
        conn.execute("ANALYZE tenants, workflows, alerts, schedules, workflow_successes")
        evaluated = [5, 50, 150, 250]
        plan = _generic_plan(conn, "monitoring_evaluation_inputs", INPUT_TYPES,
                             {"workflow_ids": evaluated, **RATE_PROFILE})
        for relation in ("schedules", "workflow_successes"):
            scans = _scans_of(plan, relation)
            assert scans, relation
            read = sum(s["Actual Rows"] * s["Actual Loops"] for s in scans)
            assert read == len(evaluated), (relation, plan)


def test_the_server_keeps_one_plan_of_the_claim(db: Database) -> None:
    """The claim's batch size is a constant of its text, so once psycopg has prepared it the
    server runs the plan it keeps instead of planning the claim afresh at every pass (with
    the size a parameter, each fresh plan looked cheaper than the kept one: one plan a pass)."""
    at = datetime(2026, 3, 1)
    with db.connection() as conn:
        conn.execute("INSERT INTO outcome_queue (attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for,"
                     " finished_at) SELECT a, 1, a %% 100, a, %(at)s, %(at)s FROM generate_series(1, 20000) a",
                     {"at": at})
        conn.execute("ANALYZE outcome_queue")
        conn.commit()
    with db.transaction() as store:
        for _ in range(12):  # prepared from the sixth; the server's own choice from its sixth execution
            store.monitoring.claim_finished_attempts(at, 100)
        generic, custom = store.conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH next AS%'"
        ).fetchone()
    assert generic >= 1 and custom <= 5, (generic, custom)


def test_the_server_keeps_one_plan_of_the_resumed_claim(db: Database) -> None:
    """A pass after a full batch resumes the claim's walk after that batch's last (finished_at,
    id). Its bounds reach the plan as sub-selects, unknown to a fresh plan as to the kept one,
    so the kept plan is chosen: with them as plain parameters, each fresh plan saw how far the
    queue reaches past the position and looked cheaper, and a drain planned the claim at every
    pass (1 ms of each on the benchmark's ledger). The queue and the ledger's months are the
    benchmark's: 200,000 outcomes, batch 500, the 16 months a deployment keeps."""
    at = datetime(2026, 3, 1, tzinfo=UTC)
    for month in range(16):
        with db.transaction() as store:
            store.retention.ensure_partition(datetime(2025 + month // 12, month % 12 + 1, 1, tzinfo=UTC))
    with db.connection() as conn:
        conn.execute("INSERT INTO outcome_queue (attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for,"
                     " finished_at) SELECT a, 1, a %% 100, a, %(at)s, %(at)s + a * interval '1 second'"
                     " FROM generate_series(1, 200000) a", {"at": at})
        conn.execute("ANALYZE outcome_queue")
        conn.commit()
    with db.transaction() as store:
        for n in range(12):  # as a drain resumes: each pass after the position the one before ended at
            after = (at + timedelta(seconds=500 * n), 500 * n)
            store.monitoring.claim_finished_attempts(at + timedelta(days=3), 500, after)
        generic, custom = store.conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH next AS%'"
        ).fetchone()
    assert generic >= 1 and custom <= 5, (generic, custom)


def test_the_claim_deletes_the_rows_it_locked_by_their_position(db: Database) -> None:
    """The claim's delete finds the queue rows it has just locked by their position (a TID
    scan), not by a second probe of the queue's primary key for each of them."""
    at = datetime(2026, 3, 1, tzinfo=UTC)
    with db.connection() as conn:
        conn.execute("INSERT INTO outcome_queue (attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for,"
                     " finished_at) SELECT a, 1, a %% 100, a, %(at)s, %(at)s FROM generate_series(1, 2000) a",
                     {"at": at})
        conn.execute("ANALYZE outcome_queue")
        conn.execute("SET LOCAL tickwarden.platform = 'on'")
        params = {"now": at, "after_at": None, "after_id": None, "launch": False, "not_retryable": [], "patient": []}
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + claim_text(500, recent_months(at)),
                            params).fetchone()[0][0]["Plan"]
        conn.rollback()
    scans = [s for s in _scans_of(plan, "outcome_queue") if s["Node Type"] != "ModifyTable"]  # the delete itself
    deleted = [s for s in scans if s["Node Type"] == "Tid Scan"]
    walks = [s for s in scans if s["Node Type"] != "Tid Scan"]
    assert len(deleted) == 1 and deleted[0]["Actual Rows"] == 500, scans
    # The walk goes by the queue's order, as a plain index scan or a bitmap one as the schema's
    # statistics have it (a schema reused after other tests plans it one way, a new one the other).
    assert [_index_of(s) for s in walks] == ["outcome_queue_order_idx"], walks


def test_the_claim_looks_for_an_open_alert_for_successes_alone(db: Database) -> None:
    """A claimed failure is evaluated whatever its workflow's alert, so the claim probes the
    open alerts for its successes alone, and says no alert for the rest."""
    at = datetime(2026, 3, 1, tzinfo=UTC)
    with db.connection() as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('acme', 'acme', %s)", (at,))
        conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                     " SELECT 1, 'wf-' || w, %s, %s FROM generate_series(1, 10) w", (at, at))
        conn.execute(
            """INSERT INTO alerts (tenant_id, workflow_id, status, first_severity, severity, owner, failure_count,
                                   cadence_seconds, escalation_multiplier, escalate_after, escalate_at,
                                   first_failure_at, last_failure_at, opened_at)
               SELECT 1, id, 'open', 'warning', 'warning', 'customer', 3, 3600, 3, 6, %(at)s, %(at)s, %(at)s, %(at)s
                 FROM workflows""", {"at": at})
        # one run per workflow, every third a success
        conn.execute("""INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,
                                          deadline_at, created_at, finished_at, error_category, error)
                        SELECT 1, w.id, %(at)s, s, 0, 1, %(at)s, %(at)s, %(at)s,
                               CASE WHEN s = 'failed' THEN 'step_error' END, CASE WHEN s = 'failed' THEN 'x' END
                          FROM workflows w,
                               LATERAL (SELECT CASE WHEN w.id %% 3 = 0 THEN 'succeeded' ELSE 'failed' END AS s) x""",
                     {"at": at})
        conn.execute("INSERT INTO outcome_queue (attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for,"
                     " finished_at) SELECT id, 1, workflow_id, id, scheduled_for, finished_at FROM runs")
        conn.commit()
        conn.execute("SET LOCAL tickwarden.platform = 'on'")
        params = {"now": at, "after_at": None, "after_id": None, "launch": False, "not_retryable": [], "patient": []}
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + claim_text(500, recent_months(at)),
                            params).fetchone()[0][0]["Plan"]
        conn.rollback()
    probes = sum(s["Actual Loops"] for s in _scans_of(plan, "alerts"))
    assert probes == 3, plan  # workflows 3, 6 and 9: the successes
    with db.transaction() as store:
        claimed = store.monitoring.claim_finished_attempts(at, 500)
    assert sorted((c.workflow_id, c.run_status, c.alert_open) for c in claimed) == [
        (w, "succeeded", True) if w % 3 == 0 else (w, "failed", False) for w in range(1, 11)]
