"""Shared benchmark plumbing: a throwaway schema on a real PostgreSQL, and timing."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import psycopg
from psycopg import sql

from tickwarden.migrate import upgrade

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
