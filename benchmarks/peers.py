"""Peers: Procrastinate's and PgQueuer's no-op job throughput on this machine, when installed.

    python -m benchmarks.peers [--seconds 4] [--json]

Each peer gets its own schema in the benchmark database, a backlog of no-op jobs, and two
worker processes (Procrastinate: concurrency 4 each; PgQueuer: batch 1, as DESIGN.md
quotes it). Jobs per second = jobs done / wall time from the first job's start to the
last one's end, across both processes: their start-up and closing waits are left out. The worker benchmark measures them in the same run as
tickwarden's workers (`pip install -e '.[bench]'` installs both).
"""

from __future__ import annotations

import asyncio
import importlib.util
import multiprocessing as mp
import time
from typing import Any

from benchmarks import common
from benchmarks.common import BENCH_URL, Figure, bench_schema, finish, progress, rate

PROCESSES = 2


def installed() -> list[str]:
    return [name for name in ("procrastinate", "pgqueuer") if importlib.util.find_spec(name) is not None]


# When this process's jobs ran: the first start and the last end, and how many. Start-up and
# the drain's closing wait are not the peer's throughput, so the span is taken from the jobs.
_SPAN: list[float] = []


def _ran(t0: float) -> None:
    _SPAN[:] = [min(_SPAN[0], t0) if _SPAN else t0, time.perf_counter(), (_SPAN[2] if _SPAN else 0) + 1]


def _span() -> tuple[int, float, float]:
    return (int(_SPAN[2]), _SPAN[0], _SPAN[1]) if _SPAN else (0, time.perf_counter(), time.perf_counter())


def _procrastinate_app(schema: str) -> tuple[Any, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=BENCH_URL, kwargs={"options": f"-c search_path={schema}"}))

    @app.task(name="noop")
    async def noop() -> None:
        _ran(time.perf_counter())

    return app, noop


def _procrastinate_worker(args: tuple[str, float]) -> tuple[int, float, float]:
    schema, seconds = args

    async def work() -> tuple[int, float, float]:
        app, _ = _procrastinate_app(schema)
        async with app.open_async():
            try:
                await asyncio.wait_for(app.run_worker_async(concurrency=4, wait=False, install_signal_handlers=False),
                                       seconds * 10)
            except TimeoutError:
                pass
            return _span()

    return asyncio.run(work())


def procrastinate_rate(jobs: int, seconds: float) -> float:
    """No-op jobs per second through Procrastinate: PROCESSES workers of concurrency 4 drain `jobs`."""
    with bench_schema("benchprocr") as schema:
        app, noop = _procrastinate_app(schema)
        with app.open():
            app.schema_manager.apply_schema()
            for start in range(0, jobs, 1000):
                noop.batch_defer(*({} for _ in range(min(1000, jobs - start))))
        with mp.get_context("spawn").Pool(PROCESSES) as pool:
            spans = pool.map(_procrastinate_worker, [(schema, seconds)] * PROCESSES)
    return rate(spans)


def _pgqueuer_worker(args: tuple[str, float]) -> tuple[int, float, float]:
    schema, seconds = args

    async def work() -> tuple[int, float, float]:
        import psycopg
        from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
        from pgqueuer.adapters.persistence.queries import Queries
        from pgqueuer.core.qm import QueueManager
        from pgqueuer.domain.types import QueueExecutionMode

        conn = await psycopg.AsyncConnection.connect(BENCH_URL, autocommit=True,
                                                     options=f"-c search_path={schema}")
        qm = QueueManager(Queries(PsycopgDriver(conn)))

        @qm.entrypoint("noop")
        async def noop(job: object) -> None:
            _ran(time.perf_counter())

        try:
            await asyncio.wait_for(qm.run(batch_size=1, mode=QueueExecutionMode.drain), seconds * 10)
        except TimeoutError:
            pass
        await conn.close()
        return _span()

    return asyncio.run(work())


def pgqueuer_rate(jobs: int, seconds: float) -> float:
    """No-op jobs per second through PgQueuer: PROCESSES queue managers at batch 1 drain `jobs`."""

    async def prepare(schema: str) -> None:
        import psycopg
        from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
        from pgqueuer.adapters.persistence.queries import Queries

        conn = await psycopg.AsyncConnection.connect(BENCH_URL, autocommit=True, options=f"-c search_path={schema}")
        queries = Queries(PsycopgDriver(conn))
        await queries.install(create_schema=False)
        for start in range(0, jobs, 1000):
            count = min(1000, jobs - start)
            await queries.enqueue(["noop"] * count, [None] * count, [0] * count)
        await conn.close()

    with bench_schema("benchpgq") as schema:
        asyncio.run(prepare(schema))
        with mp.get_context("spawn").Pool(PROCESSES) as pool:
            spans = pool.map(_pgqueuer_worker, [(schema, seconds)] * PROCESSES)
    return rate(spans)


def measure(seconds: float) -> dict[str, float]:
    """No-op jobs/s of each installed peer, labelled as the tables print them; {} when none is installed."""
    result = {}
    if "procrastinate" in installed():
        progress("peer: Procrastinate no-op jobs")
        result[f"Procrastinate ({PROCESSES} procs x concurrency 4)"] = procrastinate_rate(int(1000 * seconds), seconds)
    if "pgqueuer" in installed():
        progress("peer: PgQueuer no-op jobs")
        result[f"PgQueuer ({PROCESSES} procs, batch 1)"] = pgqueuer_rate(int(1000 * seconds), seconds)
    return result


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="about how long each peer's backlog lasts")
    args = parser.parse_args()
    figures = [Figure(f"{name} no-op", value, "jobs/s") for name, value in measure(args.seconds).items()]
    if not figures:
        print("neither Procrastinate nor PgQueuer is installed: pip install -e '.[bench]'")
    finish("peers: no-op job throughput", figures, args.json)


if __name__ == "__main__":
    main()
