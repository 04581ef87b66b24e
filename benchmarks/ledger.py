"""Ledger benchmark: consecutive-failure count vs history size; run creation and lease throughput.

    python -m benchmarks.ledger [--large 10000000] [--small 10000] [--seconds 4] [--json]

1. The count for one workflow (a streak of 5 failures after its newest success), by the
   evaluation's own statement (`evaluation_inputs`: the streak with the workflow and its alert)
   made as the poller's pass makes it (with the plans the server keeps, `send_generic_plans`),
   with `small` and then `large` rows of other history in the ledger (half of it
   the same workflow's older runs, half other workflows'), median of many calls.
2. Runs created per second (ticks in batches of 100 per transaction, and one per
   transaction) and attempts leased per second, with 1 and 4 concurrent clients.
3. The floor beside each lease figure, in the same run: a raw `FOR UPDATE SKIP LOCKED`
   claim of as many rows per transaction on a bare job table (no ledger, no run rows to
   move), with as many clients — the ceiling any Postgres queue reaches on this machine.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from datetime import timedelta

from tests.helpers import lease
from benchmarks import common
from benchmarks.common import EPOCH, Figure, Target, bench_schema, connect, finish, median_ms, progress, rate, report
from tickwarden.store import Store, TickRequest


def fill_history(schema: str, rows: int) -> int:
    """Insert `rows` runs of history, oldest first, and return the target workflow id."""
    with connect(schema) as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('bench', 'bench', %s)", (EPOCH,))
        conn.execute(
            "INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
            " SELECT 1, 'wf-' || g, %s, %s FROM generate_series(1, 100) g",
            (EPOCH, EPOCH),
        )
        own = rows // 2
        # Each workflow's history goes in newest first. The product's trigger notes a success in
        # `workflow_successes` only when it is newer than the one noted, and every version of that
        # row one transaction writes stays in its chain, walked by each later note of the same
        # workflow: oldest first, the millions of successes of one workflow in one statement took
        # time growing with their square (20,000 rows of history 0.8 s, 40,000 2.1 s, 80,000 7.1 s;
        # the 10,000,000 never ended).
        # The target workflow's own older history: alternating outcomes, all older than its newest success.
        conn.execute(
            """
            INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,
                              deadline_at, created_at, finished_at)
            SELECT 1, 1, %(epoch)s + g * interval '1 minute',
                   CASE WHEN g %% 3 = 0 THEN 'failed' ELSE 'succeeded' END, 0, 1,
                   %(epoch)s, %(epoch)s, %(epoch)s
              FROM generate_series(%(own)s, 1, -1) g
            """,
            {"epoch": EPOCH, "own": own},
        )
        conn.execute(
            """
            INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,
                              deadline_at, created_at, finished_at)
            SELECT 1, 2 + g %% 99, %(epoch)s + g * interval '1 second',
                   CASE WHEN g %% 5 = 0 THEN 'failed' ELSE 'succeeded' END, 0, 1, %(epoch)s, %(epoch)s, %(epoch)s
              FROM generate_series(%(other)s, 1, -1) g
            """,
            {"epoch": EPOCH, "other": rows - own},
        )
        latest = EPOCH + timedelta(minutes=own + 10)
        conn.execute(
            """
            INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,
                              deadline_at, created_at, finished_at)
            SELECT 1, 1, %(latest)s + g * interval '1 minute', CASE WHEN g = 0 THEN 'succeeded' ELSE 'failed' END,
                   0, 1, %(latest)s, %(latest)s, %(latest)s
              FROM generate_series(0, 5) g
            """,
            {"latest": latest},
        )
        conn.execute("ANALYZE runs")
    return 1


def time_count(schema: str, rows: int, repeat: int) -> float:
    fill_history(schema, rows)
    with connect(schema) as conn:
        store = Store(conn)
        # as the poller's pass makes it: its transaction runs the plans the server keeps per connection
        store.execution.send_generic_plans()
        assert store.monitoring.evaluation_inputs([1])[0].failures == 5
        return median_ms(lambda: store.monitoring.evaluation_inputs([1]), repeat)


def _create_worker(args: tuple[str, int, int, float, int]) -> tuple[int, float, float]:
    schema, client, batch, seconds, workflows = args
    created = 0
    with connect(schema) as conn:
        store = Store(conn)
        base = EPOCH + timedelta(days=client * 1000)
        t0 = time.perf_counter()
        deadline = t0 + seconds
        minute = 0
        while time.perf_counter() < deadline:
            ticks = []
            for _ in range(batch):
                ticks.append(TickRequest(1, 1 + minute % workflows, base + timedelta(minutes=minute), 0, base))
                minute += 1
            with conn.transaction():
                created += len(store.ledger.create_tick_runs(ticks, base))
    return created, t0, time.perf_counter()


def _lease_worker(args: tuple[str, int, float, int]) -> tuple[int, float, float]:
    schema, client, seconds, limit = args
    leased = 0
    with connect(schema) as conn:
        store = Store(conn)
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            with conn.transaction():
                got = lease(store, f"bench-{client}", EPOCH + timedelta(days=10_000), 60, limit=limit)
            if not got:
                break
            leased += len(got)
    return leased, t0, time.perf_counter()


def throughput(clients: int, seconds: float, batch: int) -> tuple[float, float, float]:
    with bench_schema("benchtp") as schema:
        with connect(schema) as conn:
            conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('bench', 'bench', %s)", (EPOCH,))
            conn.execute(
                "INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                " SELECT 1, 'wf-' || g, %s, %s FROM generate_series(1, 1000) g",
                (EPOCH, EPOCH),
            )
        with mp.get_context("spawn").Pool(clients) as pool:
            create_rate = rate(pool.map(_create_worker, [(schema, c, batch, seconds, 1000) for c in range(clients)]))
            lease1_rate = rate(pool.map(_lease_worker, [(schema, c, seconds, 1) for c in range(clients)]))
            lease10_rate = rate(pool.map(_lease_worker, [(schema, c, seconds, 10) for c in range(clients)]))
    return create_rate, lease1_rate, lease10_rate


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()

    with bench_schema() as schema:
        progress(f"consecutive-failure count over {args.small:,} rows of history")
        small = time_count(schema, args.small, args.repeat)
    t0 = time.perf_counter()
    with bench_schema() as schema:
        progress(f"filling {args.large:,} rows of history (the longest set-up here)")
        large = time_count(schema, args.large, args.repeat)
    fill = time.perf_counter() - t0
    report(
        "consecutive-failure count (streak of 5), median per call",
        [
            (f"{args.small:,} rows of history", f"{small:.3f} ms"),
            (f"{args.large:,} rows of history", f"{large:.3f} ms  (set-up {fill:.0f} s)"),
            ("ratio large/small", f"{large / small:.2f}x"),
        ],
    )
    flat = args.large >= 10_000_000 and args.small <= 10_000
    figures = [
        Figure(f"consecutive-failure count, {args.large:,} vs {args.small:,} rows of history", large, "ms", small,
               Target("<=", 1.2, of_floor=True) if flat else None),
        Figure(f"consecutive-failure count, {args.large:,} rows of history", large, "ms", target=Target("<", 1)),
    ]
    progress("floor: raw SKIP LOCKED claims on a bare job table")
    raw = common.raw_claims([(c, n) for c in (1, 4) for n in (1, 10, 100)], args.seconds, 1_000_000)
    report("floor: raw SKIP LOCKED claim on a bare job table",
           [(f"{c} client(s), {n} per txn", f"{r:,.0f} rows/s") for (c, n), r in raw.items()])
    rows = []
    for clients in (1, 4):
        for batch in (100, 1):
            progress(f"run creation (batch {batch}) and lease, {clients} client(s)")
            create_rate, lease1, lease10 = throughput(clients, args.seconds, batch)
            rows.append((f"{clients} client(s), create batch {batch}", f"{create_rate:,.0f} runs/s"))
            figures.append(Figure(f"runs created, {clients} client(s), batch {batch} per txn", create_rate, "runs/s"))
            if batch == 100:
                rows.append((f"{clients} client(s), lease 1 per txn", f"{lease1:,.0f} attempts/s"))
                rows.append((f"{clients} client(s), lease 10 per txn", f"{lease10:,.0f} attempts/s"))
                for limit, leased in ((1, lease1), (10, lease10)):
                    figures.append(Figure(f"attempts leased, {clients} client(s), {limit} per txn", leased,
                                          "attempts/s", raw[(clients, limit)]))
    report("run creation and lease throughput", rows)
    finish("ledger figures (floor: the smaller ledger; a raw SKIP LOCKED claim of as many rows per txn)",
           figures, args.json)


if __name__ == "__main__":
    main()
