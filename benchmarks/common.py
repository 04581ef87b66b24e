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
def bench_schema(prefix: str = "bench") -> Iterator[str]:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(BENCH_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
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
