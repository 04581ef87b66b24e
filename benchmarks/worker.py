"""Worker benchmark: per-attempt overhead warm vs cold, and attempts per second.

    python -m benchmarks.worker [--attempts N] [--repeat 60] [--cold 8] [--seconds 4] [--workflows 16]
                                [--months 16] [--no-peers] [--warm-only] [--json]

The ledger has the month partitions a deployment keeps (`--months`: retention's upkeep
creates this month's and the next two, and keeps 400 days of runs by default, so 16 of
them besides the DEFAULT partitions): a statement that does not name a run's month reads
every one of them.

1. Overhead of one attempt of a no-op python step on a warm environment: the whole
   `run_once` (lease, load, authenticate, run in the environment process, record the
   outcome and the step row), median of `repeat` attempts; the bare round trip to
   the environment process beside it.
2. The same attempt with a cold wake (the environment process started first), median
   of `cold` attempts.
3. Attempts per second through 1 and 4 workers (threads of one process, as
   `tickwarden worker --concurrency 4`), each draining `attempts` queued no-op runs,
   and through 4 `tickwarden worker` processes: once with every run of ONE workflow,
   then with the runs spread over `workflows` workflows. The target is judged on the
   spread figures. Each drain is timed as the peers' are (benchmarks/peers.py): from its first
   attempt's start to its last one's end, as the ledger records them, so the workers' start-up
   and the benchmark's wait for the end are left out; and its backlog is as long as theirs
   (`attempts`, by default 1,000 × `seconds`): a drain of a few hundred attempts lasts a few
   tenths of a second, and its figure moves with whatever else the machine does meanwhile.
   A success moves its workflow's one `workflow_successes` row (migration 0026), whose row
   lock is held through the commit's disk flush, so the successes of one workflow commit one
   at a time; a fleet's outcomes come from many workflows, each finishing one run per tick,
   so they meet that lock only by chance.
   The one-workflow figures stay beside them: the contended worst case (a backlog of
   one workflow's runs after an outage drains at that rate).
The benchmark's pools are made as `tickwarden worker` makes its own (`generic_plans`).
With `--warm-only`, only the warm attempt (with the CPU per warm attempt of the worker
process, its database backends and the environment process beside it, read from /proc: the
server runs on this machine), its round trips and the spread throughput of 1 and 4 worker
threads are measured: a quick before/after comparison of the worker's own work (`--repeat`
a few hundred for CPU figures steadier than the clock tick).

4. Beside them, in the same run: a raw `SKIP LOCKED` claim of one row per transaction
   (the floor of any lease), and Procrastinate's and PgQueuer's no-op job throughput
   when they are installed (`pip install -e '.[bench]'`; see benchmarks/peers.py) and
   not left out with `--no-peers` (for quick before/after comparisons).
"""

from __future__ import annotations

import itertools
import os
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from psycopg.pq import Trace

from benchmarks import common, peers
from benchmarks.common import (BENCH_URL, Figure, Target, backends_cpu, bench_schema, finish, ledger_months, process_cpu,
                               progress, report)
from tests.helpers import publish
from tickwarden.cli.worker_cmd import DEFAULT_BATCH
from tickwarden.clock import WallClock
from tickwarden.db import Database
from tickwarden.store import TickRequest
from tickwarden.worker import Worker

KEY = "bench-signing-key"
NOOP = {"steps": [{"name": "noop", "kind": "python", "call": "tests.steps:noop", "depends_on": []}]}


def setup(db: Database, clock: WallClock):
    now = clock.now()
    with db.transaction() as store:
        tenant = store.catalog.upsert_tenant("bench", now)
        user = store.catalog.apply_user(tenant.id, "owner@bench.test", "owner@bench.test", True, now).row
        env = store.catalog.apply_environment(tenant.id, "main", None, 600, now).row
        return publish(store, tenant.id, "noop", now, environment_id=env.id, publisher_id=user.id, recipe=NOOP,
                       timeout_seconds=60, cron="* * * * *", cadence_seconds=60)


_offset = [0]


def more_workflows(db: Database, wf, clock: WallClock, count: int) -> list:
    """`wf` and `count - 1` more workflows like it (same tenant, publisher and environment)."""
    now = clock.now()
    with db.transaction() as store:
        return [wf] + [publish(store, wf.tenant_id, f"noop-{i}", now, environment_id=wf.environment_id,
                               publisher_id=wf.publisher_id, recipe=NOOP, timeout_seconds=60, cron="* * * * *",
                               cadence_seconds=60) for i in range(1, count)]


def queue(db: Database, wf, clock: WallClock, count: int) -> datetime:
    """Queue `count` runs of `wf` (a workflow, or a list of them, the runs dealt out in turn).

    The runs are due at distinct microseconds from the start of the current UTC month, so they
    land in this month's partitions as a deployment's do (not in the DEFAULT ones), and are due
    at once (a benchmark queues a few thousand: a few milliseconds past the month's start).
    """
    now = clock.now()
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    ticks = []
    wfs = wf if isinstance(wf, list) else [wf]
    for i in range(count):
        _offset[0] += 1
        at = month + timedelta(microseconds=_offset[0])
        assert at <= now, "a queued run is not due yet: the month began a moment ago"
        w = wfs[i % len(wfs)]
        ticks.append(TickRequest(w.tenant_id, w.id, at, 0, at + timedelta(days=7000)))
    with db.transaction() as store:
        store.ledger.create_tick_runs(ticks, now)
    return now


class TripCounter:
    """Counts client/server round trips at the protocol level: libpq's trace of every connection.

    A round trip is a message the client then waits on: a simple `Query` or the `Sync`
    that closes an extended-protocol exchange (a pipeline sends one `Sync` for many
    statements). `commits` counts explicit `COMMIT`s only: an autocommitted statement
    commits too, without one.
    """

    def __init__(self, path: Path):
        self.path = path
        self.file = path.open("w")

    def configure(self, conn) -> None:
        conn.pgconn.trace(self.file.fileno())
        conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)

    def reset(self) -> None:
        self.file.flush()
        os.truncate(self.path, 0)

    def count(self) -> tuple[int, int]:
        self.file.flush()
        trips = commits = 0
        for line in self.path.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[0] == "F" and parts[2] in ("Query", "Sync"):
                trips += 1
            if parts[0] == "F" and "COMMIT" in line:
                commits += 1
        return trips, commits


def round_trips(wf, clock: WallClock, schema: str, batch: int, attempts: int = 20) -> tuple[float, float]:
    """Round trips and explicit commits per warm attempt, on a worker whose connections are traced."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        counter = TripCounter(Path(tmp) / "trace")
        with Database(BENCH_URL, schema=schema, max_size=4, configure=counter.configure, generic_plans=True) as db:
            worker = Worker(db, "bench-trips", clock=clock, secret_key=KEY, batch=batch)
            queue(db, wf, clock, attempts + 7)
            for _ in range(6):  # psycopg prepares a statement at its 5th use: a round trip once, not per attempt
                timed_attempt(worker, clock)
            counter.reset()
            for _ in range(attempts):
                timed_attempt(worker, clock)
            trips, commits = counter.count()
            worker.close(clock.now())  # gives back the lease taken with the last outcome
    return trips / attempts, commits / attempts


def timed_attempt(worker: Worker, clock: WallClock) -> float:
    t0 = time.perf_counter()
    wake = worker.run_once(clock.now())
    elapsed = (time.perf_counter() - t0) * 1000
    assert wake <= clock.now(), "the attempt was not leased"
    return elapsed


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--attempts", type=int, default=None,
                        help="queued runs each throughput figure drains (default: 1,000 × --seconds, as the peers)")
    parser.add_argument("--repeat", type=int, default=60)
    parser.add_argument("--cold", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each floor and peer measurement")
    parser.add_argument("--batch", type=int, default=0,
                        help="attempts each worker leases at once (default: as `tickwarden worker`)")
    parser.add_argument("--workflows", type=int, default=16,
                        help="workflows the spread throughput runs are dealt out over (the target's figures)")
    parser.add_argument("--months", type=int, default=16,
                        help="month partitions of the ledger besides DEFAULT (retention keeps 16 by default)")
    parser.add_argument("--no-peers", action="store_true", help="leave out Procrastinate and PgQueuer")
    parser.add_argument("--warm-only", action="store_true",
                        help="only the warm attempt, its client CPU and round trips, and 1 and 4 threads, spread")
    args = parser.parse_args()
    if not 2 <= args.workflows <= 10_000:
        parser.error("--workflows must be between 2 and 10000")
    if args.attempts is None:
        args.attempts = int(1000 * args.seconds)
    if args.attempts < 1:
        parser.error("--attempts must be at least 1")
    if args.warm_only:
        warm_only(args)
        return
    clock = WallClock()
    progress("floor: raw SKIP LOCKED claims of one row per transaction, 1 and 4 clients")
    raw = common.raw_claims([(1, 1), (4, 1)], args.seconds, 1_000_000)
    peer_rates = {} if args.no_peers else peers.measure(args.seconds)
    figures: list[Figure] = []
    with bench_schema("benchw") as schema, Database(BENCH_URL, schema=schema, max_size=12, generic_plans=True) as db:
        wf = setup(db, clock)
        ledger_months(db, clock.now(), args.months)
        worker = Worker(db, "bench-1", clock=clock, secret_key=KEY, batch=args.batch or DEFAULT_BATCH)

        cold = []
        for _ in range(args.cold):
            queue(db, wf, clock, 1)
            worker.environments.close(clock.now())
            cold.append(timed_attempt(worker, clock))

        warm, _ = warm_attempts(db, worker, wf, clock, args.repeat)
        [instance] = worker.environments.live()
        request = {"op": "run", "tenant_id": wf.tenant_id, "step": {"name": "noop", "kind": "python",
                                                                    "call": "tests.steps:noop"}, "inputs": {}}
        trips = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            instance.process.call(request, 10)
            trips.append((time.perf_counter() - t0) * 1000)
        worker.close(clock.now())
        db_trips, commits = round_trips(wf, clock, schema, args.batch or DEFAULT_BATCH)

        rows = [
            ("warm attempt, no-op step (median)", f"{statistics.median(warm):.1f} ms  (p90 {sorted(warm)[int(len(warm) * .9)]:.1f} ms)"),
            ("  of which environment round trip", f"{statistics.median(trips):.2f} ms"),
            ("cold wake + attempt (median)", f"{statistics.median(cold):.1f} ms"),
            ("database round trips per warm attempt", f"{db_trips:.1f} ({commits:.1f} explicit COMMIT)"),
        ]
        figures += [
            Figure("warm attempt overhead, no-op step (median)", statistics.median(warm), "ms",
                   statistics.median(trips), Target("<", 5)),
            Figure("cold wake + attempt (median)", statistics.median(cold), "ms", statistics.median(warm)),
            Figure("database round trips per warm attempt", db_trips, "round trips"),
        ]
        spread = more_workflows(db, wf, clock, args.workflows)
        processes = 0.0
        for backlog, label_of in ((wf, "{}"), (spread, f"{{}}, spread over {args.workflows} workflows")):
            judged = backlog is spread
            for n in (1, 4):
                label = f"{n} worker{'s' if n > 1 else ''}"
                rate = through_threads(db, backlog, clock, n, args.attempts, args.batch, tag='s' if judged else '')
                rows.append((f"throughput, {label_of.format(label)}", f"{rate:.0f} attempts/s"))
                figures.append(Figure(f"throughput, {label_of.format(label + ' (threads of one process)')}", rate,
                                      "attempts/s", raw[(n, 1)], Target(">=", 1000) if n == 4 and judged else None))
            progress(f"4 tickwarden worker processes{'' if backlog is wf else ', spread'}")
            processes = through_processes(db, backlog, clock, schema, args.attempts, args.batch)
            rows.append((f"throughput, {label_of.format('4 worker processes')}", f"{processes:.0f} attempts/s"))
            figures.append(Figure(f"throughput, {label_of.format('4 worker processes')}", processes, "attempts/s",
                                  raw[(4, 1)], Target(">=", 1000) if judged else None))
        for peer, peer_rate in peer_rates.items():
            figures.append(Figure(f"throughput, 4 worker processes vs {peer}", processes, "attempts/s", peer_rate))
        report("worker: per-attempt overhead and throughput (no-op recipe)", rows)
        report("floor and peers, measured in this run", [
            *((f"raw SKIP LOCKED claim, {c} client(s), 1 per txn", f"{r:,.0f} rows/s") for (c, _), r in raw.items()),
            *((peer, f"{r:,.0f} no-op jobs/s") for peer, r in peer_rates.items()),
        ] + ([] if peer_rates else [("peers", "left out (--no-peers)" if args.no_peers else
                                     "Procrastinate and PgQueuer not installed (pip install -e '.[bench]')")]))
    finish("worker figures (floor: a raw SKIP LOCKED claim of one row per txn, as many clients; or a peer)",
           figures, args.json)


@dataclass(frozen=True)
class WarmCpu:
    """CPU per warm attempt (ms): this process (all its threads), its database backends, the environment process."""

    worker: float
    backend: float
    environment: float


def warm_attempts(db: Database, worker: Worker, wf, clock: WallClock, repeat: int) -> tuple[list[float], WarmCpu]:
    """`repeat` timed warm attempts of `wf` (ms each), and the CPU they cost per attempt (ms).

    The backends' and the environment's CPU are read from /proc (the server runs on this
    machine; 0 otherwise), in clock ticks: meaningful over a few hundred attempts. Give `db`
    an application_name of its own, or other clients' backends are counted too.
    """
    queue(db, wf, clock, repeat + 5)
    for _ in range(5):  # warm up caches and prepared plans
        timed_attempt(worker, clock)
    [instance] = worker.environments.live()
    server, environment, cpu = backends_cpu(db), process_cpu(instance.process.pid), time.process_time()
    warm = [timed_attempt(worker, clock) for _ in range(repeat)]
    cpu = time.process_time() - cpu
    server, environment = backends_cpu(db) - server, process_cpu(instance.process.pid) - environment
    return warm, WarmCpu(*(seconds * 1000 / repeat for seconds in (cpu, server, environment)))


def warm_only(args) -> None:
    """The warm attempt, its client CPU and round trips, and the spread throughput of 1 and 4 threads."""
    clock = WallClock()
    batch = args.batch or DEFAULT_BATCH
    with bench_schema("benchw") as schema, Database(BENCH_URL, schema=schema, max_size=12, generic_plans=True,
                                                    application_name=f"bench-worker-{os.getpid()}") as db:
        wf = setup(db, clock)
        ledger_months(db, clock.now(), args.months)
        spread = more_workflows(db, wf, clock, args.workflows)
        worker = Worker(db, "bench-1", clock=clock, secret_key=KEY, batch=batch)
        warm, cpu = warm_attempts(db, worker, wf, clock, args.repeat)
        worker.close(clock.now())
        db_trips, commits = round_trips(wf, clock, schema, batch)
        rates = {n: through_threads(db, spread, clock, n, args.attempts, args.batch, tag="s") for n in (1, 4)}
    report("worker: warm attempts only (no-op recipe)", [
        ("warm attempt, no-op step (median)", f"{statistics.median(warm):.1f} ms  (p90 {sorted(warm)[int(len(warm) * .9)]:.1f} ms)"),
        ("worker process CPU per warm attempt", f"{cpu.worker:.2f} ms"),
        ("database backend CPU per warm attempt", f"{cpu.backend:.2f} ms"),
        ("environment process CPU per warm attempt", f"{cpu.environment:.2f} ms"),
        ("database round trips per warm attempt", f"{db_trips:.1f} ({commits:.1f} explicit COMMIT)"),
        *((f"throughput, {n} worker{'s' if n > 1 else ''}, spread over {args.workflows} workflows",
           f"{rate:.0f} attempts/s") for n, rate in rates.items()),
    ])
    finish("worker figures, warm attempts only", [
        Figure("warm attempt overhead, no-op step (median)", statistics.median(warm), "ms", None, Target("<", 5)),
        Figure("worker process CPU per warm attempt", cpu.worker, "ms"),
        Figure("database backend CPU per warm attempt", cpu.backend, "ms"),
        Figure("environment process CPU per warm attempt", cpu.environment, "ms"),
        Figure("database round trips per warm attempt", db_trips, "round trips"),
        *(Figure(f"throughput, {n} worker{'s' if n > 1 else ''} (threads of one process), spread over "
                 f"{args.workflows} workflows", rate, "attempts/s", None, Target(">=", 1000) if n == 4 else None)
          for n, rate in rates.items()),
    ], args.json)


def through_threads(db: Database, backlog, clock: WallClock, n: int, attempts: int, batch: int, *,
                    tag: str = "") -> float:
    """Attempts per second of `n` workers, threads of this process, draining `attempts` queued runs of
    `backlog` once warm: over the drain's span in the ledger (`drained_rate`)."""
    workers = [Worker(db, f"bench-{tag}{n}-{i}", clock=clock, secret_key=KEY, batch=batch or DEFAULT_BATCH)
               for i in range(n)]
    for w in workers:  # wake every environment first: throughput is measured warm
        queue(db, backlog, clock, 1)
        w.run_once(clock.now())

    def drain(w: Worker) -> None:
        while w.run_once(clock.now()) <= clock.now():
            pass

    def drain_all() -> None:
        threads = [threading.Thread(target=drain, args=(w,)) for w in workers]
        [t.start() for t in threads]
        [t.join() for t in threads]

    # Warm the connections too: the pool opens one per concurrent worker at their first
    # concurrent pass, and each new connection plans the exchange's statements once (tens of
    # milliseconds of server CPU each over the ledger's months): a cost of a worker's start,
    # not of its attempts. The warm-up above ran the workers one at a time, on one connection.
    queue(db, backlog, clock, 2 * n * (batch or DEFAULT_BATCH))
    drain_all()
    since = queue(db, backlog, clock, attempts)
    drain_all()
    for w in workers:
        w.close(clock.now())
    return drained_rate(db, since, attempts)


def drained_rate(db: Database, since: datetime, attempts: int) -> float:
    """Attempts per second of the drain of the runs queued at `since` (`queue`'s instant, their
    attempts' `queued_at`): from the first one's start to the last one's end, as recorded in
    the ledger.

    The span the peers' figures are taken over (benchmarks/peers.py): the workers' start-up and
    the benchmark's wait for the drain's end are left out.
    """
    with db.connection() as conn:
        done, first, last = conn.execute(
            "SELECT count(*), min(started_at), max(finished_at) FROM attempts"
            " WHERE queued_at = %s AND status = 'succeeded'", (since,)).fetchone()
    if done != attempts:
        raise RuntimeError(f"the drain finished {done} attempts of the {attempts} queued")
    return done / (last - first).total_seconds()


def pending(db: Database) -> bool:
    """Whether a queued run is not finished yet: a probe of the open runs' partial index, not a
    count of the ledger's runs, which took the workers' cores from them while they were timed."""
    with db.connection() as conn:
        return conn.execute("SELECT EXISTS (SELECT 1 FROM runs WHERE finished_at IS NULL)").fetchone()[0]


_drains = itertools.count(1)  # each process drain's number, in its workers' ids


def served(db: Database, worker_ids: list[str]) -> int:
    """How many of these workers have finished an attempt."""
    with db.connection() as conn:
        return conn.execute("SELECT count(DISTINCT worker_id) FROM attempts WHERE status = 'succeeded'"
                            " AND worker_id = ANY (%s)", (worker_ids,)).fetchone()[0]


def through_processes(db: Database, wf, clock: WallClock, schema: str, attempts: int, batch: int, n: int = 4) -> float:
    """Drain `attempts` runs with `n` real `tickwarden worker` processes, timed once they are warm.

    `batch`: each process's `--batch` (0: its default).
    """
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": BENCH_URL, "TICKWARDEN_SCHEMA": schema,
           "TICKWARDEN_SECRET_KEY": KEY}
    options = ["--batch", str(batch)] if batch else []
    drain = next(_drains)
    ids = [f"p{drain}-{i}" for i in range(n)]  # its own ids: `served` counts this drain's processes alone
    procs = [subprocess.Popen([str(root / ".venv" / "bin" / "tickwarden"), "worker", "--poll", "0.02", "--id", wid,
                               *options],
                              cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for wid in ids]
    try:
        # Wake every process's environment (and plan its connection's statements) first: a process
        # leases a batch at once, so a few queued runs may all go to one process and leave another cold.
        deadline = time.monotonic() + 120
        while served(db, ids) < n:
            if time.monotonic() > deadline:
                raise RuntimeError("a worker process served no attempt in two minutes")
            queue(db, wf, clock, 2 * n)
            while pending(db):
                time.sleep(0.05)
        since = queue(db, wf, clock, attempts)
        while pending(db):  # the figure is read from the ledger: how often this looks does not move it
            time.sleep(0.1)
        return drained_rate(db, since, attempts)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)


if __name__ == "__main__":
    main()
