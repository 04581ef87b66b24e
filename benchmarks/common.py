"""Shared benchmark plumbing: a throwaway schema on a real PostgreSQL, timing, and the figures' contract.

Every benchmark ends with `finish(...)`: a table of its figures, and with `--json` a last line
holding a JSON list of `{name, value, unit, floor, ratio, target, met}`, one object per figure.
`floor` is the floor or peer measured in the same run (same unit), `ratio` is value / floor, and
`met` says whether the figure meets its DESIGN.md target (null where the design sets none, or
where the benchmark ran at a size the target does not speak of).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from tickwarden.migrate import upgrade
from tickwarden.retention import AHEAD_MONTHS

if TYPE_CHECKING:
    from tickwarden.db import Database

BENCH_URL = os.environ.get(
    "TICKWARDEN_BENCH_DATABASE_URL",
    os.environ.get("TICKWARDEN_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@contextmanager
def bench_schema(prefix: str = "bench", *, migrated: bool = True) -> Iterator[str]:
    """A throwaway schema, migrated unless told otherwise, dropped on the way out."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(BENCH_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        if migrated:
            with psycopg.connect(BENCH_URL, options=f"-c search_path={name}") as conn:
                upgrade(conn, EPOCH)
        yield name
    finally:
        with psycopg.connect(BENCH_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def ledger_months(db: Database, now: datetime, months: int) -> datetime | None:
    """Create `months` month partitions of the ledger, the newest AHEAD_MONTHS ahead of `now`, as retention's
    upkeep does; return the first month's start (None for none)."""
    first = now.year * 12 + now.month - 1 - (months - 1 - AHEAD_MONTHS)
    starts = [datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC) for index in range(first, first + months)]
    for at in starts:
        with db.transaction() as store:
            store.retention.ensure_partition(at)
    return starts[0] if starts else None


def connect(schema: str, **kwargs: object) -> psycopg.Connection:
    return psycopg.connect(BENCH_URL, options=f"-c search_path={schema}", **kwargs)


def analyze_schema(conn: psycopg.Connection) -> None:
    """ANALYZE the tables of the connection's schema (the first of its search_path), and no other's.

    A bare ANALYZE goes through every table of the benchmark database: other benchmarks'
    schemas and whatever else runs there, each waited for (a loader's ALTER TABLE held it, and
    the two deadlocked). A partitioned table is analyzed with its partitions.
    """
    tables = conn.execute(
        "SELECT format('%I', relname) FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
        " AND relkind IN ('r', 'p') AND NOT relispartition ORDER BY relname").fetchall()
    conn.execute("ANALYZE " + ", ".join(name for (name,) in tables))


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def report(title: str, rows: list[tuple[str, str]]) -> None:
    print(f"\n== {title}")
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")


@dataclass(frozen=True)
class Target:
    """A DESIGN.md target: `value op bound`, or `ratio op bound` when it is relative to the floor."""

    op: str
    bound: float
    of_floor: bool = False

    def met(self, value: float, ratio: float | None) -> bool | None:
        subject = ratio if self.of_floor else value
        if subject is None or math.isnan(subject):
            return None
        return {"<": subject < self.bound, "<=": subject <= self.bound, ">=": subject >= self.bound}[self.op]

    def describe(self, unit: str) -> str:
        return f"{self.op} {self.bound:g}x floor" if self.of_floor else f"{self.op} {self.bound:g} {unit}"


@dataclass(frozen=True)
class Figure:
    """One measured figure, with the floor or peer it is compared with in the same run."""

    name: str
    value: float
    unit: str
    floor: float | None = None
    target: Target | None = None

    @property
    def ratio(self) -> float | None:
        return self.value / self.floor if self.floor else None

    def as_json(self) -> dict[str, object]:
        """The figure as published; `met` is judged on the published value and ratio, so that a
        program checking `ratio <= bound` on the document agrees with it at the bound too."""
        value = round(self.value, 4)
        ratio = None if self.ratio is None else round(self.ratio, 4)
        return {
            "name": self.name,
            "value": value,
            "unit": self.unit,
            "floor": None if self.floor is None else round(self.floor, 4),
            "ratio": ratio,
            "target": None if self.target is None else self.target.describe(self.unit),
            "met": None if self.target is None else self.target.met(value, ratio),
        }


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser for a benchmark: its docstring's first line, and `--json`."""
    result = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    result.add_argument("--json", action="store_true", help="print the figures as a JSON list on the last line")
    return result


_T0 = time.perf_counter()


def progress(message: str) -> None:
    """Say what a long set-up is doing, on stderr, so that stdout's last line stays the JSON."""
    print(f"  [{time.perf_counter() - _T0:6.0f} s] {message}", file=sys.stderr, flush=True)


def number(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}".rstrip("0").rstrip(".")


def table(figures: list[Figure], title: str | None = None) -> str:
    """Figures as aligned columns: value, floor, ratio, target and whether it is met."""
    header = ("figure", "value", "floor/peer", "ratio", "target", "met")
    rows = [header] + [
        (f.name, f"{number(f.value)} {f.unit}", number(f.floor), "—" if f.ratio is None else f"{f.ratio:.2f}x",
         "—" if f.target is None else f.target.describe(f.unit),
         {None: "—", True: "yes", False: "NO"}[f.as_json()["met"]])  # type: ignore[index]
        for f in figures
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"\n== {title}"] if title else []
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                                      enumerate(zip(row, widths, strict=True))).rstrip())
    return "\n".join(lines)


def finish(title: str, figures: list[Figure], as_json: bool) -> None:
    """Print the figures; with `as_json`, their JSON list is the very last line of stdout."""
    print(table(figures, title), flush=True)
    if as_json:
        print(json.dumps([f.as_json() for f in figures]), flush=True)


def _raw_claim_worker(args: tuple[str, float, int]) -> tuple[int, float, float]:
    schema, seconds, limit = args
    claimed = 0
    with connect(schema) as conn:
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            with conn.transaction():
                rows = conn.execute(
                    "UPDATE peer_jobs SET status = 'done' WHERE id IN ("
                    " SELECT id FROM peer_jobs WHERE status = 'todo' ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)"
                    " RETURNING id", (limit,)
                ).fetchall()
            if not rows:
                break
            claimed += len(rows)
    return claimed, t0, time.perf_counter()


def rate(spans: list[tuple[int, float, float]]) -> float:
    """Items per second over clients' (count, start, end) spans: from the first start to the last end.

    perf_counter is system-wide on Linux, so spans of different processes compare.
    """
    return sum(s[0] for s in spans) / (max(s[2] for s in spans) - min(s[1] for s in spans))


def raw_claims(cases: list[tuple[int, int]], seconds: float, rows: int) -> dict[tuple[int, int], float]:
    """Rows per second a bare `FOR UPDATE SKIP LOCKED` claim reaches, per (clients, rows per transaction).

    The floor of any PostgreSQL queue on this machine: one statement per claim on a bare
    job table with one partial index, no ledger and no rows to move. Each case starts
    from a freshly filled table, so that none pays for the dead rows of the one before; the
    table holds `rows`, or fewer for small claims, which cannot drain as many in the time.
    """
    result = {}
    for clients, limit in cases:
        fill = min(rows, limit * 50_000)
        with bench_schema("benchpeer") as schema:
            with connect(schema) as conn:
                conn.execute("CREATE TABLE peer_jobs (id bigint PRIMARY KEY, status text NOT NULL)")
                conn.execute("INSERT INTO peer_jobs SELECT g, 'todo' FROM generate_series(1, %s) g", (fill,))
                conn.execute("CREATE INDEX ON peer_jobs (id) WHERE status = 'todo'")
                conn.commit()
                conn.autocommit = True
                conn.execute("VACUUM ANALYZE peer_jobs")
            with mp.get_context("spawn").Pool(clients) as pool:
                result[(clients, limit)] = rate(pool.map(_raw_claim_worker, [(schema, seconds, limit)] * clients))
    return result


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/`pid`/stat after the command's name (the state is [0]), or None when it is not here."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_cpu(pid: int) -> float:
    """CPU seconds (user and system) process `pid` of this machine has used; 0 when it is not here."""
    fields = _proc_stat(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backends_cpu(db: Database) -> float:
    """CPU seconds the database server's backends serving `db` (those of its application_name) have used.

    Read from /proc: the server runs on this machine (0 for a backend that is not). The time the
    database spends on a client's statements, less sensitive to the machine's other load than wall time.
    """
    with db.connection() as conn:
        pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name ="
                                           " current_setting('application_name')")]
    return sum(process_cpu(pid) for pid in pids)


def server_cpu(conn: psycopg.Connection) -> float | None:
    """CPU seconds the database server's processes that have ended used, all of them, or None off this machine.

    Read from /proc as the postmaster's children's time (`cutime` and `cstime`): a
    backend's CPU is counted there once its connection has closed and the postmaster has
    collected it. So the difference across a piece of work whose connections all closed
    is what the server spent on it, with whatever else ended meanwhile (on a quiet server,
    nothing). None when the server is not on this machine.
    """
    own = _proc_stat(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
    fields = None if own is None else _proc_stat(int(own[1]))  # [1]: the parent, the postmaster
    if fields is None:
        return None
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def settled_server_cpu(application_name: str, timeout: float = 5.0) -> float | None:
    """`server_cpu` once no backend of `application_name` is left, so that theirs is counted."""
    with psycopg.connect(BENCH_URL, autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
        ).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.05)
        time.sleep(0.1)  # the postmaster collects an ended backend at its next signal
        return server_cpu(conn)


BARE_LEDGER = """
CREATE UNLOGGED TABLE runs (id bigint PRIMARY KEY, workflow text NOT NULL, scheduled_for timestamptz NOT NULL,
                            manual boolean NOT NULL, status text NOT NULL, finished_at timestamptz);
CREATE UNLOGGED TABLE attempts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, run_id bigint NOT NULL,
                                number int NOT NULL, status text NOT NULL, finished_at timestamptz);
CREATE INDEX ON attempts (run_id);
"""
_BARE_INSERT = """
WITH r AS (
  INSERT INTO runs (id, workflow, scheduled_for, manual, status)
  SELECT * FROM unnest(%(ids)s::bigint[], %(workflows)s::text[], %(ticks)s::timestamptz[], %(manual)s::boolean[],
                       %(queued)s::text[])
  RETURNING id
)
INSERT INTO attempts (run_id, number, status)
SELECT n.id, g, 'queued' FROM unnest(%(ids)s::bigint[], %(counts)s::int[]) AS n (id, count),
       generate_series(1, n.count) AS g
"""
_BARE_UPDATE = """
WITH o AS (SELECT * FROM unnest(%(ids)s::bigint[], %(statuses)s::text[], %(finished)s::timestamptz[])
             AS o (id, status, finished_at)),
     r AS (UPDATE runs SET status = o.status, finished_at = o.finished_at FROM o WHERE runs.id = o.id)
UPDATE attempts SET status = o.status, finished_at = o.finished_at
  FROM o WHERE attempts.run_id = o.id AND attempts.run_id = ANY(%(ids)s::bigint[])
"""


def bare_ledger(runs: list[dict[str, object]]) -> tuple[float, int]:
    """Seconds to write a simulation's runs and outcomes with nothing else, and how many statements it took.

    The floor of any simulation that keeps its ledger in PostgreSQL and moves one virtual
    instant at a time: `write_bare_ledger` on a scratch schema, timed. A generous floor:
    the simulation records each outcome when it happens, and reads, checks and decides.
    """
    with bench_schema("benchfloor", migrated=False) as schema, connect(schema, autocommit=True) as conn:
        conn.execute(BARE_LEDGER)
        t0 = time.perf_counter()
        statements = write_bare_ledger(conn, runs)
        return time.perf_counter() - t0, statements


def write_bare_ledger(conn: psycopg.Connection, runs: list[dict[str, object]]) -> int:
    """Write `runs` (a simulation's read-out) into `BARE_LEDGER`'s tables; return the statements sent.

    For each instant at which the simulation recorded runs (their `created_at`), in order,
    one statement inserts those runs and their attempts, and one more records their final
    status, each its own transaction (`conn` is in autocommit). Two unlogged tables, as
    the simulation's are, keyed and with the one index the update needs: no foreign key,
    trigger or check. The update names its attempts' runs as an array as well as in the
    join, and is planned for its own arrays each time (never prepared), so that it finds
    them by the index without statistics (nothing analyzes these tables): joined alone, or
    planned once for any arrays, it would guess a run has hundreds of attempts and scan
    them all, and the floor would grow with the ledger as no simulation's writes do.
    """
    by_instant: dict[datetime, list[dict[str, object]]] = {}
    for run in runs:
        by_instant.setdefault(run["created_at"], []).append(run)  # type: ignore[arg-type]
    for instant in sorted(by_instant):
        group = by_instant[instant]
        ids = [run["id"] for run in group]
        conn.execute(_BARE_INSERT, {
            "ids": ids, "workflows": [f"{run['tenant']}/{run['workflow']}" for run in group],
            "ticks": [run["scheduled_for"] for run in group], "manual": [run["manual"] for run in group],
            "queued": ["queued"] * len(group), "counts": [run["attempts"] or 0 for run in group]})
        conn.execute(_BARE_UPDATE, {"ids": ids, "statuses": [run["status"] for run in group],
                                    "finished": [run["finished_at"] for run in group]}, prepare=False)
    return 2 * len(by_instant)
