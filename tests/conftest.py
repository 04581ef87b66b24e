"""Shared fixtures: a real PostgreSQL, one empty migrated schema per test, a virtual clock."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from tickwarden.clock import VirtualClock
from tickwarden.db import Database
from tickwarden.migrate import upgrade

# Fake receivers listen on loopback: allow it for tenant channels, as a local setup would
# (tests of the outbound policy itself set their own value).
os.environ.setdefault("TICKWARDEN_ALLOW_PRIVATE_URLS", "127.0.0.0/8")

from benchmarks.catalogs import Upkeep, tidy
from tests.dbutil import TEST_URL, SchemaPool, drop_database, make_database


def pytest_configure(config):
    # Once per run, in the controlling process (xdist workers carry `workerinput`): the
    # suite churns the server's catalogs, which nothing reclaims where autovacuum is off.
    if hasattr(config, "workerinput"):
        return
    try:
        tidy(TEST_URL, full=True)
    except psycopg.OperationalError:  # no server: the tests that need one say so
        return
    config.catalog_upkeep = Upkeep(TEST_URL).start()


def pytest_unconfigure(config):
    upkeep = getattr(config, "catalog_upkeep", None)
    if upkeep is not None:
        upkeep.stop()


@pytest.fixture
def start() -> datetime:
    return datetime(2026, 11, 30, 1, 55, tzinfo=UTC)


@pytest.fixture
def clock(start: datetime) -> VirtualClock:
    return VirtualClock(start)


def _migrate(name: str) -> None:
    with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
        upgrade(conn, datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture(scope="session")
def schema_pool() -> Iterator[SchemaPool]:
    pool = SchemaPool()
    yield pool
    pool.close()


@pytest.fixture
def schema(schema_pool: SchemaPool) -> Iterator[str]:
    """A schema with every migration applied and no rows: fresh, or emptied after an earlier test."""
    name = schema_pool.acquire(_migrate)
    yield name
    schema_pool.release(name)


@pytest.fixture
def db(schema: str) -> Iterator[Database]:
    database = Database(TEST_URL, schema=schema, min_size=1, max_size=6)
    # The test's first borrow finds its connection ready: a borrower that waits makes the pool grow, and
    # a pool lends in turn, so a test on one thread would alternate between two connections, the second
    # opened at a moment that depends on the machine's load (each has its own kept cursors and plans).
    database.pool.wait()
    yield database
    database.close()


@pytest.fixture
def counted(db: Database, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the transactions opened on `db` (one entry each)."""
    opened: list[int] = []
    real = db.transaction

    @contextlib.contextmanager
    def transaction(*args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(1)
        with real(*args, **kwargs) as store:
            yield store

    monkeypatch.setattr(db, "transaction", transaction)
    return opened


@pytest.fixture
def tenant_database() -> Iterator[str]:
    """A second database on the same server: a tenant's own, not the platform's."""
    url = make_database()
    yield url
    drop_database(url)


@pytest.fixture
def embedded_data_dir() -> Iterator[Path]:
    """A data directory for the embedded PostgreSQL, outside pytest's own temporary root.

    Run as root, pgserver starts the server as the user `pgserver`, and opens the path's
    parents to it (g+rx, o+rx). pytest closes its root (`/tmp/pytest-of-<user>`) back to 0700
    whenever a pytest session starts on the machine, so a server under `tmp_path` fails to
    start ("could not access directory") when another session starts at the wrong moment.
    """
    path = Path(tempfile.mkdtemp(prefix="tickwarden-embedded-"))
    try:
        yield path / "data"
    finally:
        shutil.rmtree(path, ignore_errors=True)


# The fault suite's figures (tests/faults), printed last so that a program can read them.
# They travel on the test reports, which reach the controlling process under xdist too.
FAULT_LINES: list[tuple[str, list[str]]] = []


def pytest_runtest_logreport(report):
    if report.when == "call":
        FAULT_LINES.extend((value[0], value[1:]) for name, value in report.user_properties if name == "faults")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not FAULT_LINES:
        return
    terminalreporter.section("fault suite")
    for line, notes in FAULT_LINES:
        for note in notes:
            terminalreporter.write_line(f"  {line.split(':')[0]}: {note}")
    for line, _ in FAULT_LINES:
        terminalreporter.write_line(line)
