"""Shared fixtures: a real PostgreSQL, one fresh schema per test, a virtual clock."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest

from tickwarden.clock import VirtualClock
from tickwarden.db import Database
from tickwarden.migrate import upgrade

# Fake receivers listen on loopback: allow it for tenant channels, as a local setup would
# (tests of the outbound policy itself set their own value).
os.environ.setdefault("TICKWARDEN_ALLOW_PRIVATE_URLS", "127.0.0.0/8")

from tests.dbutil import TEST_URL, drop_database, drop_schema, make_database, make_schema


@pytest.fixture
def start() -> datetime:
    return datetime(2026, 11, 30, 1, 55, tzinfo=UTC)


@pytest.fixture
def clock(start: datetime) -> VirtualClock:
    return VirtualClock(start)


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema with every migration applied."""
    name = make_schema()
    with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
        upgrade(conn, datetime(2026, 1, 1, tzinfo=UTC))
    yield name
    drop_schema(name)


@pytest.fixture
def db(schema: str) -> Iterator[Database]:
    database = Database(TEST_URL, schema=schema, min_size=1, max_size=6)
    yield database
    database.close()


@pytest.fixture
def counted(db: Database, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the transactions opened on `db` (one entry each)."""
    opened: list[int] = []
    real = db.transaction

    @contextlib.contextmanager
    def transaction():  # type: ignore[no-untyped-def]
        opened.append(1)
        with real() as store:
            yield store

    monkeypatch.setattr(db, "transaction", transaction)
    return opened


@pytest.fixture
def tenant_database() -> Iterator[str]:
    """A second database on the same server: a tenant's own, not the platform's."""
    url = make_database()
    yield url
    drop_database(url)
