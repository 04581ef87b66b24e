"""Retention benchmark: the sweeper on a populated ledger, beside raw set-based statements.

    python -m benchmarks.retention [--workflows 1000] [--days 400] [--json]

1. Fill a ledger: `workflows` daily workflows with a run and an attempt (log tail,
   error text, outputs) for each of `days` days, one run in ten failed.
2. Copy it into a second schema, the floor: the same expiry as bare statements
   (delete the metadata past 90 days, clear logs, clear payloads), each one
   transaction over the whole ledger, unbounded, protecting nothing.
3. Sweep the first with `RetentionSweeper` (bounded batches, per-workflow marks) until
   no backlog remains, and report rows per second beside the floor's.
4. An idle pass on the swept ledger: what the loop costs every ten minutes.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta

from benchmarks.common import BENCH_URL, EPOCH, analyze_schema, bench_schema, connect, median_ms, report
from tickwarden.db import Database
from tickwarden.retention import RetentionSweeper

METADATA_DAYS = 90


def fill(schema: str, workflows: int, days: int) -> None:
    with connect(schema) as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('bench', 'Bench', %s)", (EPOCH,))
        conn.execute("INSERT INTO retention_policies (tenant_id, metadata_days, updated_at)"
                     " SELECT id, %s, %s FROM tenants", (METADATA_DAYS, EPOCH))
        conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                     " SELECT 1, 'wf-' || g, %s, %s FROM generate_series(1, %s) g", (EPOCH, EPOCH, workflows))
        # Each workflow's days newest first: the product's trigger notes a success only when it is
        # newer than the one noted, and each note that moves it leaves a version of that row that
        # every later note of the workflow in the same statement walks (see benchmarks.ledger).
        conn.execute(
            "INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,"
            " deadline_at, error_category, error, created_at, finished_at)"
            " SELECT 1, w.id, %(epoch)s + g * interval '1 day',"
            "        CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END, 0, 1,"
            "        %(epoch)s + g * interval '1 day' + interval '1 hour',"
            "        CASE WHEN g %% 10 = 0 THEN 'step_error' END, CASE WHEN g %% 10 = 0 THEN 'load failed' END,"
            "        %(epoch)s + g * interval '1 day', %(epoch)s + g * interval '1 day' + interval '3 minutes'"
            "   FROM workflows w, generate_series(%(days)s - 1, 0, -1) g", {"epoch": EPOCH, "days": days})
        conn.execute(
            "INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, queued_at,"
            " started_at, finished_at, error, log_tail, outputs)"
            " SELECT 1, r.workflow_id, r.id, r.scheduled_for, 1, r.status, r.scheduled_for, r.scheduled_for, r.finished_at,"
            "        r.error, 'step load: 3 rows', '{\"rows\": 3, \"sample\": [1, 2, 3]}' FROM runs r")
        analyze_schema(conn)


def copy(source: str, target: str) -> None:
    with connect(target) as conn:
        for table in ("tenants", "retention_policies", "workflows", "runs", "attempts"):
            newest_first = " ORDER BY scheduled_for DESC, id DESC" if table == "runs" else ""  # as `fill`
            conn.execute(f"INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT * FROM {source}.{table}{newest_first}")
        analyze_schema(conn)


def floor(schema: str, now) -> dict[str, tuple[int, float]]:
    """The same expiry as bare statements, unbounded, one transaction each (no protection of streaks)."""
    results = {}
    # Metadata first, as the sweeper does, so that both do the same work.
    statements = {
        "metadata": f"DELETE FROM runs WHERE scheduled_for < %(now)s - interval '{METADATA_DAYS} days'",
        "logs": ("UPDATE attempts a SET log_tail = NULL, error = NULL FROM runs r WHERE a.run_id = r.id"
                 " AND r.scheduled_for < %(now)s - interval '30 days' AND a.log_tail IS NOT NULL"),
        "payloads": ("UPDATE attempts a SET outputs = '{}' FROM runs r WHERE a.run_id = r.id"
                     " AND r.scheduled_for < %(now)s - interval '7 days' AND a.outputs <> '{}'"),
    }
    with connect(schema) as conn:
        for klass, statement in statements.items():
            t0 = time.perf_counter()
            rows = conn.execute(statement, {"now": now}).rowcount
            conn.commit()
            if klass == "metadata":
                rows *= 2  # each run deleted takes its one attempt with it, as the sweeper counts
            results[klass] = (rows, time.perf_counter() - t0)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--days", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    now = EPOCH + timedelta(days=args.days, hours=12)
    with bench_schema("bench_ret") as schema, bench_schema("bench_ret_floor") as floor_schema:
        t0 = time.perf_counter()
        fill(schema, args.workflows, args.days)
        copy(schema, floor_schema)
        filled = time.perf_counter() - t0
        raw = floor(floor_schema, now)
        db = Database(BENCH_URL, schema=schema, min_size=1, max_size=2)
        try:
            sweeper = RetentionSweeper(db)
            passes, expired = 0, dict.fromkeys(("metadata", "logs", "payloads"), 0)
            t0 = time.perf_counter()
            while True:
                result = sweeper.sweep(now)
                passes += 1
                for klass in expired:
                    expired[klass] += result.expired[klass]
                if not result.more:
                    break
            swept = time.perf_counter() - t0
            idle_ms = median_ms(lambda: sweeper.sweep(now), 5)
        finally:
            db.close()
    raw_rows = sum(rows for rows, _ in raw.values())
    raw_seconds = sum(seconds for _, seconds in raw.values())
    total = sum(expired.values())
    rate, raw_rate = total / swept, raw_rows / raw_seconds
    runs = args.workflows * args.days
    report(f"retention sweeper, {runs:,} runs and attempts ({args.workflows:,} workflows × {args.days} days)", [
        ("fill", f"{filled:.1f} s"),
        ("sweeper", f"{swept:.1f} s in {passes} passes: {total:,} rows ({rate:,.0f} rows/s)"),
        ("  per class", ", ".join(f"{k} {v:,}" for k, v in expired.items())),
        ("floor (bare statements)", f"{raw_seconds:.1f} s: {raw_rows:,} rows ({raw_rate:,.0f} rows/s)"),
        ("  per class", ", ".join(f"{k} {r:,} in {s:.1f} s" for k, (r, s) in raw.items())),
        ("sweeper / floor rate", f"{rate / raw_rate:.2f}"),
        ("idle pass (nothing due)", f"{idle_ms:.1f} ms"),
    ])
    if args.json:
        print(json.dumps([
            {"name": "retention_sweep_rows_per_second", "value": round(rate), "unit": "rows/s",
             "floor": round(raw_rate), "ratio": round(rate / raw_rate, 3), "target": None, "met": None},
            {"name": "retention_idle_pass", "value": round(idle_ms, 2), "unit": "ms", "floor": None,
             "ratio": None, "target": None, "met": None},
        ]))


if __name__ == "__main__":
    main()
