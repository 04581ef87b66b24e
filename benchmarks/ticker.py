"""Ticker benchmark: passes over 100,000 active schedules.

    python -m benchmarks.ticker [--schedules 100000] [--repeat 3] [--batch 20000] [--months 16] [--json]

Every schema's ledger has the month partitions a deployment keeps (`--months`, as the
worker benchmark's), the runs' month among them: the floor and the passes write the same
partitions.

0. The floor, measured first in the same run: a bare `INSERT … SELECT` of the same runs
   and first attempts into the same tables (the DESIGN.md target is 1.5× of it).
1. Every schedule is `* * * * *`, so at each minute all of them are due: the time
   (wall and client CPU) to turn 100,000 due schedules into 100,000 runs (and their
   first attempts) and advance every schedule, median over `repeat` minutes; reported
   both as one pass (batch = fleet) and as the batched passes the service runs.
2. A quiet pass (nothing due) over the same fleet: the cost every wake-up pays,
   right after the mass updates and after a vacuum (which can only remove the old
   row versions when no older snapshot is open), and on a freshly filled fleet.
3. A mixed fleet (1/5 every minute, 1/5 every five minutes, the rest hourly at
   spread minutes, 60 distinct expressions in all) at 12:05, where ~41k are due.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timedelta

from benchmarks import common
from benchmarks.common import BENCH_URL, EPOCH, Figure, Target, bench_schema, finish, ledger_months, progress, report
from tickwarden.db import Database
from tickwarden.ticker import Ticker

START = EPOCH.replace(hour=12)


def fill(schema: str, count: int, mixed: bool, months: int = 0) -> None:
    """Insert one tenant, `count` workflows with due schedules, set-based, into a ledger of `months` months."""
    with Database(BENCH_URL, schema=schema, max_size=1) as db:
        ledger_months(db, START, months)
        fill_schedules(db, count, mixed)


def fill_schedules(db: Database, count: int, mixed: bool) -> None:
    """Insert one tenant and `count` workflows, each with one schedule due at START (or, mixed, soon after)."""
    with db.connection() as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('bench', 'bench', %s)", (EPOCH,))
        conn.execute(
            "INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
            " SELECT 1, 'wf-' || g, %s, %s FROM generate_series(1, %s) g",
            (EPOCH, EPOCH, count),
        )
        cron = ("CASE WHEN id %% 5 = 0 THEN '* * * * *' WHEN id %% 5 = 1 THEN '*/5 * * * *'"
                " ELSE (id %% 58 + 2)::text || ' * * * *' END") if mixed else "'* * * * *'"
        cadence = "CASE WHEN id % 5 = 0 THEN 60 WHEN id % 5 = 1 THEN 300 ELSE 3600 END" if mixed else "60"
        conn.execute(
            f"INSERT INTO schedules (tenant_id, workflow_id, cron, timezone, status, cadence_seconds, version,"
            f" created_at, updated_at) SELECT 1, id, {cron}, 'UTC', 'active', {cadence.replace('%', '%%')}, 1, %s, %s"
            f" FROM workflows",
            (EPOCH, EPOCH),
        )
        # next_fire_at: the first fire at or after START (computed per expression in SQL for speed here only)
        conn.execute(
            """
            INSERT INTO schedule_fires (schedule_id, tenant_id, workflow_id, next_fire_at)
            SELECT s.id, s.tenant_id, s.workflow_id,
                   CASE WHEN s.cron = '* * * * *' OR s.cron = '*/5 * * * *' THEN %(start)s
                        ELSE %(start)s + (split_part(s.cron, ' ', 1)::int) * interval '1 minute' END
              FROM schedules s
            """,
            {"start": START},
        )
        conn.execute("ANALYZE tenants, workflows, schedules, schedule_fires")   # this schema only: never the whole database


def timed_pass(ticker: Ticker, now: datetime, split: dict[str, float] | None = None) -> tuple[float, float, int]:
    """Run passes at `now` until nothing is due; return wall ms, client CPU ms and passes."""
    wall0, cpu0, passes = time.perf_counter(), time.process_time(), 0
    while True:
        passes += 1
        wake = ticker.run_once(now)
        if split is not None and ticker.last_pass is not None:
            stats = ticker.last_pass
            split["trigger"] = split.get("trigger", 0.0) + stats.claim_ms + stats.advance_ms
            split["ledger"] = split.get("ledger", 0.0) + stats.insert_ms
        if wake > now:
            break
    return (time.perf_counter() - wall0) * 1000, (time.process_time() - cpu0) * 1000, passes


def insert_floor(count: int, repeat: int, months: int) -> float:
    """Median ms of a bare `INSERT … SELECT` of `count` runs and their first attempts, in one statement.

    The floor of a top-of-the-hour pass: the same rows into the same tables, indexes and
    foreign keys, with nothing decided per schedule and nothing sent back to the client.
    Each minute is committed, as a pass's are, so dead rows and index growth match.
    """
    samples = []
    with bench_schema("bench_floor") as schema:
        fill(schema, count, mixed=False, months=months)
        with Database(BENCH_URL, schema=schema, max_size=1) as db, db.connection() as conn:
            for minute in range(repeat):
                tick = START + timedelta(minutes=minute)
                t0 = time.perf_counter()
                conn.execute(
                    """
                    WITH run AS (
                        INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,
                                          attempts_count, deadline_at, created_at)
                        SELECT tenant_id, workflow_id, %(tick)s, false, 'queued', 0, 1,
                               %(tick)s + interval '1 hour', %(tick)s
                          FROM schedules
                        RETURNING id, tenant_id, workflow_id, scheduled_for)
                    INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, queued_at)
                    SELECT tenant_id, workflow_id, id, scheduled_for, 1, 'queued', %(tick)s FROM run
                    """,
                    {"tick": tick},
                )
                conn.commit()
                samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--months", type=int, default=16,
                        help="month partitions of the ledger besides DEFAULT (retention keeps 16 by default)")
    args = parser.parse_args()
    n = args.schedules
    rows: list[tuple[str, str]] = []
    figures: list[Figure] = []
    within = Target("<=", 1.5, of_floor=True)
    progress(f"floor: bare INSERT … SELECT of {n:,} runs and attempts, {args.repeat} minutes, {args.months} months")
    floor = insert_floor(n, args.repeat, args.months)
    rows.append((f"floor: bare INSERT … SELECT of {n:,} runs + attempts", f"median {floor:,.0f} ms"))
    with bench_schema("bench_ticker") as schema, Database(BENCH_URL, schema=schema, max_size=2) as db:
        progress(f"filling {n:,} schedules, all due every minute")
        fill(schema, n, mixed=False, months=args.months)
        minutes = 0
        for label, batch in (("one pass (batch = fleet)", n), (f"batched passes (batch {args.batch})", args.batch)):
            progress(f"{n:,} due: {label}, {args.repeat} minutes")
            ticker = Ticker(db, batch=batch)
            walls, cpus, trig, ledger, created, passes = [], [], [], [], 0, 0
            for _ in range(args.repeat):
                minute = START + timedelta(minutes=minutes, seconds=1)
                minutes += 1
                before = ticker.created
                split: dict[str, float] = {}
                wall, cpu, passes = timed_pass(ticker, minute, split)
                created = ticker.created - before
                walls.append(wall)
                cpus.append(cpu)
                trig.append(split["trigger"])
                ledger.append(split["ledger"])
            assert created == n, f"expected {n} runs, created {created}"
            wall = statistics.median(walls)
            rows.append((f"{n:,} due, {label}",
                         f"median {wall:,.0f} ms wall, {statistics.median(cpus):,.0f} ms client CPU"
                         f" ({passes} pass(es), {n / wall * 1000:,.0f} runs/s)"))
            rows.append(("  of which claim + cron + earliest probe", f"median {statistics.median(trig):,.0f} ms"))
            rows.append(("  of which runs and advance (create_tick_groups)", f"median {statistics.median(ledger):,.0f} ms"))
            figures.append(Figure(f"{n:,} due at once, {label}", wall, "ms", floor, within))
        quiet = Ticker(db)
        now = START + timedelta(minutes=minutes, seconds=1)
        timed_pass(quiet, now)
        # Right after mass updates the due index still holds every old version until
        # (auto)vacuum removes them, and a quiet pass walks them; then after a vacuum.
        for label in ("right after the passes above", "after VACUUM (what autovacuum restores)"):
            samples = [timed_pass(quiet, now + timedelta(seconds=5 + i)) for i in range(20)]
            idle = statistics.median(s[0] for s in samples)
            rows.append((f"{n:,} active, nothing due, {label}", f"median {idle:.2f} ms wall"))
            figures.append(Figure(f"idle pass, {n:,} active, {label}", idle, "ms",
                                  target=Target("<", 1) if label.startswith("after") else None))
            with db.connect(autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE schedules, schedule_fires")
    with bench_schema("bench_ticker") as schema, Database(BENCH_URL, schema=schema, max_size=2) as db:
        progress(f"filling {n:,} schedules for a pass with no dead row versions")
        fill(schema, n, mixed=False, months=args.months)   # every schedule next fires at 12:00: nothing is due at 11:59
        fresh = Ticker(db)
        samples = [timed_pass(fresh, START - timedelta(seconds=60 - i)) for i in range(20)]
        idle = statistics.median(s[0] for s in samples)
        rows.append((f"{n:,} active, nothing due, no dead row versions", f"median {idle:.2f} ms wall"))
        figures.append(Figure(f"idle pass, {n:,} active, no dead row versions", idle, "ms", target=Target("<", 1)))
    with bench_schema("bench_ticker") as schema, Database(BENCH_URL, schema=schema, max_size=2) as db:
        progress(f"filling {n:,} schedules of mixed cadence")
        fill(schema, n, mixed=True, months=args.months)
        ticker = Ticker(db, batch=args.batch)
        for minute in range(5):   # 12:00 … 12:04 untimed, so that 12:05 is an ordinary minute
            timed_pass(ticker, START + timedelta(minutes=minute, seconds=1))
        before = ticker.created
        wall, cpu, passes = timed_pass(ticker, START + timedelta(minutes=5, seconds=1))
        due = ticker.created - before
        rows.append((f"{n:,} mixed, {due:,} due at 12:05",
                     f"{wall:,.0f} ms wall, {cpu:,.0f} ms client CPU ({passes} pass(es))"))
        figures.append(Figure(f"{n:,} mixed, {due:,} due at 12:05", wall, "ms"))
    report(f"ticker pass over {n:,} active schedules", rows)
    finish("ticker figures (floor: bare INSERT … SELECT of the same runs and attempts)", figures, args.json)


if __name__ == "__main__":
    main()
