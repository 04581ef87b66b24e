"""API and dashboard benchmark: request latency over a fleet, and the cost of row-level security.

    python -m benchmarks.api [--tenants 200] [--workflows 10] [--runs 50] [--repeat 30] [--json]

1. Fill a fleet: tenants × workflows daily schedules with `runs` ticks each, three in ten
   of the workflows (wf-1, wf-5, wf-9 of each tenant) with an open alert and two events.
2. Serve the real app (uvicorn on a free port) and report the median latency of the
   common reads: the platform's open alerts, a member's alerts, a workflow's runs page,
   an alert's detail, the dashboard overview and a /metrics scrape.
3. The same store query (a workflow's newest 50 runs) as a tenant under row-level
   security and as the table owner without it: the policy's overhead.

Floors: a request's figure sits beside /healthz (the server's own cost of any request), the
tenant's query beside the owner's. DESIGN.md sets no target for these.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx

from benchmarks import common
from benchmarks.common import (BENCH_URL, EPOCH, Figure, analyze_schema, bench_schema, connect, finish, median_ms, progress,
                               report)
from tickwarden.api.deps import hash_token
from tickwarden.clock import VirtualClock
from tickwarden.db import Database

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def fill(schema: str, tenants: int, workflows: int, runs: int) -> None:
    with connect(schema) as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at)"
                     " SELECT 't' || g, 'Tenant ' || g, %s FROM generate_series(1, %s) g", (EPOCH, tenants))
        conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                     " SELECT t.id, 'wf-' || g, %s, %s FROM tenants t, generate_series(1, %s) g",
                     (EPOCH, EPOCH, workflows))
        conn.execute("INSERT INTO schedules (tenant_id, workflow_id, cron, status, cadence_seconds, created_at,"
                     " updated_at) SELECT tenant_id, id, '0 2 * * *', 'active', 86400, %s, %s FROM workflows",
                     (EPOCH, EPOCH))
        conn.execute(
            "INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,"
            " deadline_at, created_at, finished_at)"
            " SELECT w.tenant_id, w.id, %(now)s - g * interval '1 day',"
            "        CASE WHEN g %% 7 = 0 THEN 'failed' ELSE 'succeeded' END, 2, 1, %(now)s, %(now)s, %(now)s"
            "   FROM workflows w, generate_series(1, %(runs)s) g", {"now": NOW, "runs": runs})
        conn.execute(
            "INSERT INTO alerts (tenant_id, workflow_id, status, first_severity, severity, owner, failure_count,"
            " cadence_seconds, escalation_multiplier, escalate_after, escalate_at, first_failure_at,"
            " last_failure_at, opened_at)"
            " SELECT tenant_id, id, 'open', 'warning', 'warning', 'engineering', 1, 86400, 1, 1, %(now)s,"
            "        %(now)s, %(now)s, %(now)s FROM workflows WHERE name IN ('wf-1', 'wf-5', 'wf-9')", {"now": NOW})
        conn.execute(
            "INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner)"
            " SELECT tenant_id, id, k, %s, 'warning', 'engineering' FROM alerts, unnest(ARRAY['opened', 'noted']) k",
            (NOW,))
        conn.execute("INSERT INTO api_tokens (tenant_id, name, role, token_hash, created_at) VALUES"
                     " (NULL, 'bench', 'platform', %s, %s), (1, 'member', 'member', %s, %s)",
                     (hash_token("twk_bench_platform_token"), NOW, hash_token("twk_bench_member_token_1"), NOW))
        analyze_schema(conn)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--workflows", type=int, default=10)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    from tests.apiutil import live_server

    figures: list[Figure] = []
    with bench_schema("bench_api") as schema:
        progress(f"filling {args.tenants} tenants x {args.workflows} workflows x {args.runs} runs")
        t0 = time.perf_counter()
        fill(schema, args.tenants, args.workflows, args.runs)
        filled = time.perf_counter() - t0
        db = Database(BENCH_URL, schema=schema, min_size=2, max_size=8)
        try:
            with connect(schema) as conn:
                alert_id = conn.execute("SELECT min(id) FROM alerts WHERE tenant_id = 1").fetchone()[0]
                workflow_id = conn.execute("SELECT id FROM workflows WHERE tenant_id = 1 ORDER BY id LIMIT 1").fetchone()[0]
                open_alerts = conn.execute("SELECT count(*) FROM alerts").fetchone()[0]
                total_runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
            platform = {"Authorization": "Bearer twk_bench_platform_token"}
            member = {"Authorization": "Bearer twk_bench_member_token_1"}
            with live_server(db, VirtualClock(NOW)) as base, httpx.Client(base_url=base, timeout=30) as client:
                def get(path, headers=None, cookies=None):
                    response = client.get(path, headers=headers or {}, cookies=cookies or {})
                    assert response.status_code == 200, (path, response.status_code, response.text[:200])

                cases = [
                    ("GET /api/alerts?status=open (platform, 50 of all)", lambda: get("/api/alerts?status=open", platform)),
                    ("GET /api/alerts (member)", lambda: get("/api/alerts", member)),
                    ("GET …/workflows/wf-1/runs (member, 50)", lambda: get("/api/tenants/t1/workflows/wf-1/runs", member)),
                    ("GET /api/alerts/{id} (member)", lambda: get(f"/api/alerts/{alert_id}", member)),
                    ("GET /dashboard (platform overview)",
                     lambda: get("/dashboard", cookies={"tickwarden_token": "twk_bench_platform_token"})),
                    ("GET /metrics", lambda: get("/metrics")),
                    ("GET /healthz", lambda: get("/healthz")),
                ]
                rows = [("fleet", f"{args.tenants} tenants, {args.tenants * args.workflows} workflows, "
                                  f"{total_runs} runs, {open_alerts} open alerts (filled in {filled:.1f} s)")]
                for label, call in cases:
                    call()
                    ms = median_ms(call, args.repeat)
                    rows.append((label, f"{ms:.1f} ms median"))
                    # no DESIGN.md target; /healthz is what any request costs here
                    figures.append(Figure(f"{label}, median", ms, "ms"))
                healthz = figures[-1].value
                figures = [Figure(f.name, f.value, f.unit, healthz) for f in figures[:-1]] + figures[-1:]
            with db.transaction() as store:
                store.api.enter_tenant_context(1, platform=False)
                with_rls = median_ms(lambda: store.api.list_runs(workflow_id, None, 50), args.repeat * 5)
            with db.transaction() as store:
                without = median_ms(lambda: store.api.list_runs(workflow_id, None, 50), args.repeat * 5)
            rows.append(("store: 50 runs as tenant (RLS)", f"{with_rls:.3f} ms median"))
            rows.append(("store: 50 runs as owner (no RLS)", f"{without:.3f} ms median"))
            report("API and dashboard latency (one server thread pool, loopback)", rows)
            figures.append(Figure("store: 50 runs as tenant under row-level security", with_rls, "ms", without))
        finally:
            db.close()
    finish("API figures (floor: /healthz for a request; the owner's query without RLS)", figures, args.json)


if __name__ == "__main__":
    main()
