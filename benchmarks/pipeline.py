"""Outcome pipeline benchmark: claim → retry/verdict → evaluate → alert state, 1 and 2 replicas.

    python -m benchmarks.pipeline [--workflows 10000] [--history 100] [--outcomes 20] [--months 16]
                                  [--batch 500] [--latency-seconds 20] [--interval 2] [--json]

The ledger has the month partitions a deployment keeps (`--months`, as the worker benchmark:
retention's upkeep creates this month's and the next two, and keeps 400 days of runs by
default, so 16 of them besides the DEFAULT partitions), and each workflow's ticks are spaced
evenly from the oldest month to the present, as a deployment's history has runs of every
workflow in every month it keeps. With `--months 0` the ledger has the DEFAULT partitions
alone and the ticks follow each workflow's cadence from 2026-01-01.

1. Bulk-load (generate_series) a ledger of workflows × history finished runs:
   1,000,000 runs by default, mixed cadences (5 min, hourly, daily). Their
   attempts are not loaded: processed attempts are not in the poller's queue
   (`outcome_queue`), and the evaluator reads runs only.
2. Add `outcomes` new finished attempts per workflow, each with its row in the
   poller's queue as the worker's outcome statement writes it (200,000 by default): 70 % successes, 20 % confirmed failures, 10 % pending a retry; every
   tenth workflow fails throughout, so alerts open, count up, escalate and resolve.
3. Throughput: 1 and then 2 poller processes (`OutcomePoller.poll`, the real
   code) drain them; outcomes per second = outcomes / wall time of the drain.
   The outcomes are reset between the two runs (same ledger). Beside it, the pollers'
   own CPU time (Python and the client library, each process's first-use costs
   included, the database server's not) per outcome and as a share of the drain's wall time × replicas: the database server
   runs on the same cores, so what the pollers spend is taken from it. And the CPU time of
   the pollers' database backends per outcome (from /proc: the server is local), which
   the machine's other load disturbs far less than the wall time.
4. Latency: a producer process finishes attempts on the wall clock at a steady
   rate, each batch committed with the `NOTIFY tickwarden_wake, 'poller'` the worker's
   outcome statement sends, while 2 processes run the poller as `tickwarden serve` does
   (a `Service` thread per loop, woken by its LISTEN connection, polling every
   `--interval` otherwise); the latency of an attempt is from its finished_at to the
   commit of its evaluation. Reported as p50/p99 beside the interval.
5. The floor beside each throughput figure, in the same run: a raw `SKIP LOCKED` claim of
   `batch` rows per transaction on a bare job table, with as many clients. The DESIGN.md
   targets: >= 50,000 outcomes/s with 2 replicas on the 1M-run ledger, three runs within
   20 % of each other, and p99 latency < 1 s.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from benchmarks import common
from benchmarks.common import (BENCH_URL, EPOCH, Figure, Target, backends_cpu, bench_schema, connect, finish, ledger_months,
                               progress, report)

if TYPE_CHECKING:
    from tickwarden.db import Database

CADENCE_SQL = "(ARRAY[300, 3600, 86400])[1 + w %% 3]"  # %% : every statement has parameters
# the k-th tick of workflow w: from the origin, a step of the ledger's spacing or else of the cadence
TICK_SQL = "%(e)s::timestamptz + {k} * coalesce(%(step)s::float8, (ARRAY[300, 3600, 86400])[1 + {w} %% 3]) * interval '1 second'"


@dataclass(frozen=True)
class Ticks:
    """Where the ledger's ticks lie: workflow w's k-th at `origin + k × step` (step None: w's cadence)."""

    origin: datetime = EPOCH
    step: float | None = None

    def params(self) -> dict[str, object]:
        return {"e": self.origin, "step": self.step}


def spread_ticks(db: Database, now: datetime, months: int, ticks: int) -> Ticks:
    """Create the ledger's `months` month partitions, and space `ticks` ticks of each workflow evenly
    from the oldest month's start to a day before `now`."""
    first = ledger_months(db, now, months)
    if first is None:
        return Ticks()
    return Ticks(first, (now - timedelta(days=1) - first).total_seconds() / ticks)


def load_ledger(schema: str, workflows: int, history: int, ticks: Ticks = Ticks()) -> float:
    """Load tenants, workflows, schedules and `workflows × history` finished runs; return seconds."""
    t0 = time.perf_counter()
    with connect(schema) as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('bench', 'bench', %s)", (EPOCH,))
        conn.execute(
            "INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
            " SELECT 1, 'wf-' || w, %(e)s, %(e)s FROM generate_series(1, %(n)s) w", {"e": EPOCH, "n": workflows})
        conn.execute(
            f"""INSERT INTO schedules (tenant_id, workflow_id, cron, timezone, status, cadence_seconds,
                                      published_at, created_at, updated_at)
               SELECT 1, w, (ARRAY['*/5 * * * *', '0 * * * *', '0 2 * * *'])[1 + w %% 3], 'UTC', 'active',
                      {CADENCE_SQL}, %(e)s, %(e)s, %(e)s
                 FROM generate_series(1, %(n)s) w""", {"e": EPOCH, "n": workflows})
        conn.execute(
            f"""INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,
                                 deadline_at, created_at, started_at, finished_at, error_category, error)
               SELECT 1, w, t, s, 0, 1, t, t, t, t + interval '1 minute',
                      CASE WHEN s = 'failed' THEN 'step_error' END, CASE WHEN s = 'failed' THEN 'boom' END
                 FROM generate_series(1, %(n)s) w, generate_series(1, %(h)s) k,
                      LATERAL (SELECT {TICK_SQL.format(k="k", w="w")} AS t,
                                      CASE WHEN k < %(h)s AND (w * 7 + k) %% 13 = 0 THEN 'failed'
                                           ELSE 'succeeded' END AS s) x""",
            {**ticks.params(), "n": workflows, "h": history})
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE tenants, workflows, schedules, runs, attempts")
    return time.perf_counter() - t0


def load_outcomes(schema: str, workflows: int, history: int, outcomes: int, ticks: Ticks = Ticks()) -> int:
    """(Re)create the unprocessed outcomes: `outcomes` new runs per workflow with a finished attempt."""
    after_history = TICK_SQL.format(k="%(h)s", w="workflow_id")
    with connect(schema) as conn:
        conn.execute("DELETE FROM notification_outbox")
        conn.execute("DELETE FROM alerts")
        conn.execute(f"DELETE FROM runs WHERE scheduled_for > {after_history}", {**ticks.params(), "h": history})
        conn.execute(
            f"""INSERT INTO runs (tenant_id, workflow_id, scheduled_for, status, retry_budget, attempts_count,
                                 deadline_at, created_at, started_at, finished_at, error_category, error)
               SELECT 1, w, t, s, 2, 1, t + interval '1 day', t, t,
                      CASE WHEN s <> 'pending_retry' THEN t + interval '1 minute' END,
                      CASE WHEN s <> 'succeeded' THEN c END, CASE WHEN s <> 'succeeded' THEN 'boom' END
                 FROM generate_series(1, %(n)s) w, generate_series(1, %(o)s) j,
                      LATERAL (SELECT {TICK_SQL.format(k="(%(h)s + j)", w="w")} AS t,
                                      CASE WHEN w %% 10 = 0 THEN 'failed'
                                           WHEN (w * 31 + j * 17) %% 10 IN (1, 2) THEN 'failed'
                                           WHEN (w * 31 + j * 17) %% 10 = 3 THEN 'pending_retry'
                                           ELSE 'succeeded' END AS s,
                                      (ARRAY['step_error', 'connection', 'timeout'])[1 + (w + j) %% 3] AS c) x""",
            {**ticks.params(), "n": workflows, "h": history, "o": outcomes})
        conn.execute("DELETE FROM outcome_queue")
        inserted = conn.execute(
            f"""WITH a AS (
               INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status, queued_at,
                                     started_at, finished_at, retryable, error_category, error)
               SELECT tenant_id, workflow_id, id, scheduled_for, 1, CASE WHEN status = 'succeeded' THEN 'succeeded' ELSE 'failed' END,
                      created_at, started_at, coalesce(finished_at, started_at + interval '1 minute'), true,
                      error_category, error
                 FROM runs WHERE scheduled_for > {after_history}
               RETURNING *)
               INSERT INTO outcome_queue (attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at)
               SELECT id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at FROM a""",
            {**ticks.params(), "h": history}).rowcount
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE runs, attempts, outcome_queue, alerts")
    return inserted


def _drain(args: tuple[str, int, int, mp.synchronize.Barrier, mp.Queue]) -> None:
    schema, replica, batch, barrier, out = args
    from tickwarden.clock import WallClock
    from tickwarden.db import Database
    from tickwarden.poller import OutcomePoller

    clock = WallClock()
    db = Database(BENCH_URL, schema=schema, min_size=2, max_size=2, application_name=f"bench-drain-{replica}")
    poller = OutcomePoller(db, f"bench-{replica}", batch_size=batch)
    server0 = backends_cpu(db)
    barrier.wait()
    t0, cpu0 = time.perf_counter(), time.process_time()
    claimed = opened = events = 0
    while True:
        result = poller.poll(clock.now())
        if result.claimed == 0:
            break
        claimed += result.claimed
        opened += len(result.evaluation.opened)
        events += len(result.evaluation.event_ids)
    t1, cpu1 = time.perf_counter(), time.process_time()
    out.put((t0, t1, claimed, opened, events, cpu1 - cpu0, backends_cpu(db) - server0))
    db.close()


def collect(out: mp.Queue, procs: list[Any], what: str, *, join: bool = True) -> list[Any]:
    """One message from each of `procs` through `out`; then, with `join`, wait for them to end.

    A child that dies without its result (a crash, an exception in it) would leave a
    plain `out.get()` waiting forever, and its siblings at their barrier: the others are
    stopped and the benchmark ends with one sentence instead.
    """
    results: list[Any] = []
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=1.0))
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                for p in procs:
                    if p.is_alive():
                        p.terminate()
                    p.join()
                raise SystemExit(f"benchmarks.pipeline: a {what} process exited with code {dead[0].exitcode} "
                                 "before reporting; see its error above") from None
    for p in procs if join else ():
        p.join()
    return results


def throughput(schema: str, replicas: int, batch: int) -> tuple[float, int, int, int, float, float]:
    """Drain the outcomes with `replicas` pollers; return outcomes/s, outcomes, alerts opened,
    alert events, the pollers' CPU seconds and their database backends' (all of them together)."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(replicas), ctx.Queue()
    procs = [ctx.Process(target=_drain, args=((schema, r, batch, barrier, out),)) for r in range(replicas)]
    for p in procs:
        p.start()
    results = collect(out, procs, "drain")
    start, end = min(r[0] for r in results), max(r[1] for r in results)
    claimed = sum(r[2] for r in results)
    cpu, server = sum(r[5] for r in results), sum(r[6] for r in results)
    return claimed / (end - start), claimed, sum(r[3] for r in results), sum(r[4] for r in results), cpu, server


def _produce(args: tuple[str, float, int, int, mp.Event]) -> None:
    """Finish `rate` attempts per second on the wall clock (new runs of existing workflows)."""
    schema, seconds, rate, workflows, stop = args
    from tickwarden.clock import WallClock

    clock = WallClock()
    step = 0.1
    per_step = max(1, int(rate * step))
    with connect(schema) as conn:
        t_end = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < t_end:
            now = clock.now()
            conn.execute(
                """WITH r AS (
                       INSERT INTO runs (tenant_id, workflow_id, scheduled_for, manual, status, retry_budget,
                                         attempts_count, deadline_at, created_at, started_at, finished_at,
                                         error_category, error)
                       SELECT 1, 1 + (%(n)s + g) %% %(w)s, %(now)s, true,
                              CASE WHEN g %% 5 = 0 THEN 'failed' ELSE 'succeeded' END, 0, 1,
                              %(now)s, %(now)s, %(now)s, %(now)s,
                              CASE WHEN g %% 5 = 0 THEN 'step_error' END, CASE WHEN g %% 5 = 0 THEN 'boom' END
                         FROM generate_series(1, %(k)s) g
                       RETURNING *)
                   , a AS (
                   INSERT INTO attempts (tenant_id, workflow_id, run_id, run_scheduled_for, number, status,
                                         queued_at, started_at, finished_at, retryable, error_category, error)
                   SELECT tenant_id, workflow_id, id, scheduled_for, 1, status, created_at, started_at, finished_at, true,
                          error_category, error FROM r
                   RETURNING *)
                   INSERT INTO outcome_queue (attempt_id, tenant_id, workflow_id, run_id, run_scheduled_for,
                                              finished_at)
                   SELECT id, tenant_id, workflow_id, run_id, run_scheduled_for, finished_at FROM a""",
                {"n": n, "w": workflows, "k": per_step, "now": now})
            conn.execute("SELECT pg_notify('tickwarden_wake', 'poller')")  # as the worker's outcome statement does
            conn.commit()
            n += per_step
            time.sleep(max(0.0, step - 0.002))
    stop.set()


def _serve(args: tuple[str, int, float, mp.Event, mp.Queue, mp.Queue]) -> None:
    schema, replica, interval, stop, out, ready = args

    from tickwarden.clock import WallClock
    from tickwarden.db import Database
    from tickwarden.poller import OutcomePoller
    from tickwarden.service import Service

    clock = WallClock()
    db = Database(BENCH_URL, schema=schema, min_size=1, max_size=3)
    poller = OutcomePoller(db, f"serve-{replica}", interval_seconds=interval)
    latencies: list[float] = []
    idle_after_stop = 0

    class Measured:
        """The poller as the service runs it, noting each decided attempt's latency."""

        name = poller.name

        def run_once(self, now: datetime) -> datetime:
            nonlocal idle_after_stop
            wake = poller.run_once(now)
            decided = clock.now()
            latencies.extend((decided - f).total_seconds() for f in poller.last.finished_at)
            if stop.is_set() and poller.last.claimed == 0:
                idle_after_stop += 1
            return wake

    service = Service(db, [Measured()], clock, replica_id=f"serve-{replica}", listen=True)
    service.start()
    ready.put(replica)  # the producer starts once every replica listens: start-up is not latency
    while idle_after_stop < 2:
        time.sleep(0.2)
        if stop.is_set():
            service.wake()
    service.stop()
    out.put(latencies)
    db.close()


def latency(schema: str, replicas: int, seconds: float, rate: int, interval: float, workflows: int) -> list[float]:
    ctx = mp.get_context("spawn")
    stop, out, ready = ctx.Event(), ctx.Queue(), ctx.Queue()
    servers = [ctx.Process(target=_serve, args=((schema, r, interval, stop, out, ready),)) for r in range(replicas)]
    for p in servers:
        p.start()
    collect(ready, servers, "poller", join=False)
    time.sleep(1.0)  # their first passes (an empty claim each) and LISTEN are done
    producer = ctx.Process(target=_produce, args=((schema, seconds, rate, workflows, stop),))
    producer.start()
    producer.join()
    return [sample for samples in collect(out, servers, "poller") for sample in samples]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--workflows", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=100)
    parser.add_argument("--outcomes", type=int, default=20)
    parser.add_argument("--months", type=int, default=16,
                        help="month partitions of the ledger besides DEFAULT (retention keeps 16 by default)")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--latency-seconds", type=float, default=20)
    parser.add_argument("--latency-rate", type=int, default=500)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    full = args.workflows * args.history >= 1_000_000
    figures: list[Figure] = []

    progress(f"floor: raw SKIP LOCKED claims of {args.batch} rows per transaction, 1 and 2 clients")
    raw = common.raw_claims([(1, args.batch), (2, args.batch)], 4.0, args.workflows * args.outcomes)
    with bench_schema("benchpipe") as schema:
        from tickwarden.clock import WallClock
        from tickwarden.db import Database

        with Database(BENCH_URL, schema=schema, min_size=1, max_size=1) as db:
            ticks = spread_ticks(db, WallClock().now(), args.months, args.history + args.outcomes)
        progress(f"loading a ledger of {args.workflows * args.history:,} runs over {args.months} month partitions")
        load = load_ledger(schema, args.workflows, args.history, ticks)
        rows = [("ledger", f"{args.workflows * args.history:,} runs, {args.workflows:,} workflows, "
                           f"{args.months} month partitions (loaded in {load:.0f} s)")]
        for replicas in (1, 2):
            rates, cpu_per_outcome, cpu_share, server_per_outcome = [], [], [], []
            for run in range(args.repeat):
                progress(f"{replicas} replica(s), run {run + 1} of {args.repeat}: loading outcomes, then draining")
                n = load_outcomes(schema, args.workflows, args.history, args.outcomes, ticks)
                rate, claimed, opened, events, cpu, server = throughput(schema, replicas, args.batch)
                assert claimed == n, (claimed, n)
                rates.append(rate)
                cpu_per_outcome.append(cpu / claimed * 1e6)
                server_per_outcome.append(server / claimed * 1e6)
                cpu_share.append(cpu / (claimed / rate * replicas) * 100)
            rows.append((f"{replicas} replica(s), batch {args.batch}",
                         f"{statistics.median(rates):,.0f} outcomes/s median of {args.repeat} "
                         f"({', '.join(f'{r:,.0f}' for r in rates)}); {n:,} outcomes, "
                         f"{opened:,} alerts opened, {events:,} alert events"))
            rows.append((f"{replicas} replica(s), pollers' own CPU",
                         f"{statistics.median(cpu_per_outcome):.1f} µs per outcome, "
                         f"{statistics.median(cpu_share):.0f} % of wall time × replicas (medians)"))
            rows.append((f"{replicas} replica(s), their database backends' CPU",
                         f"{statistics.median(server_per_outcome):.1f} µs per outcome, median of "
                         f"{', '.join(f'{v:.1f}' for v in server_per_outcome)}"))
            figures.append(Figure(f"{replicas} replica(s), batch {args.batch}, median of {args.repeat} runs",
                                  statistics.median(rates), "outcomes/s", raw[(replicas, args.batch)],
                                  Target(">=", 50_000) if replicas == 2 and full else None))
            figures.append(Figure(f"{replicas} replica(s), pollers' own CPU per outcome, median of {args.repeat} runs",
                                  statistics.median(cpu_per_outcome), "µs"))
            figures.append(Figure(f"{replicas} replica(s), their backends' CPU per outcome, median of {args.repeat} runs",
                                  statistics.median(server_per_outcome), "µs"))
            if replicas == 2:
                # steady: every run within 20 % of each other (DESIGN.md); reported as the spread
                figures.append(Figure(f"{replicas} replicas, spread of {args.repeat} runs (max/min - 1)",
                                      (max(rates) / min(rates) - 1) * 100, "%", target=Target("<=", 20)))
        report("outcome pipeline throughput (claim → retry/verdict → evaluate → alert state)", rows)
        report("floor: raw SKIP LOCKED claim on a bare job table",
               [(f"{c} client(s), {b} per txn", f"{r:,.0f} rows/s") for (c, b), r in raw.items()])

        progress(f"latency: 2 replicas, {args.latency_rate:,} outcomes/s arriving for {args.latency_seconds:g} s")
        samples = latency(schema, 2, args.latency_seconds, args.latency_rate, args.interval, args.workflows)
        report(
            f"decision latency, 2 replicas, {args.latency_rate:,} outcomes/s arriving, poll interval {args.interval:g} s",
            [
                ("outcomes measured", f"{len(samples):,}"),
                ("p50", f"{pct(samples, 0.50):.3f} s"),
                ("p99", f"{pct(samples, 0.99):.3f} s"),
                ("max", f"{max(samples):.3f} s"),
                ("bound (interval + 1 s)", f"{args.interval + 1:.3f} s"),
            ],
        )
        figures.append(Figure(f"decision latency p50, 2 replicas, poll interval {args.interval:g} s",
                              pct(samples, 0.50), "s"))
        figures.append(Figure(f"decision latency p99, 2 replicas, poll interval {args.interval:g} s",
                              pct(samples, 0.99), "s", target=Target("<", 1)))
    finish("pipeline figures (floor: a raw SKIP LOCKED claim of as many rows per txn, as many clients)",
           figures, args.json)


if __name__ == "__main__":
    main()
