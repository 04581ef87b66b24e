"""`Database.retrying`: a deadlock's victim is run again whole, and only its committed run counts."""

from __future__ import annotations

import threading

import psycopg
import pytest

from tests.dbutil import TEST_URL
from tickwarden.db import Database
from tickwarden.store import Store


def _table(schema: str) -> None:
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}", autocommit=True) as conn:
        conn.execute("CREATE TABLE locks_probe (id int PRIMARY KEY, touched_by text[] NOT NULL DEFAULT '{}')")
        conn.execute("INSERT INTO locks_probe (id) VALUES (1), (2)")


def _other_side(schema: str, holding: threading.Event, work_waits: threading.Event, done: threading.Event) -> None:
    """Lock row 1, let the work lock row 2 and wait for row 1, then ask for row 2: a deadlock."""
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema} -c deadlock_timeout=5s") as conn:
        conn.execute("UPDATE locks_probe SET touched_by = touched_by || 'other'::text WHERE id = 1")
        holding.set()
        work_waits.wait(10)
        conn.execute("UPDATE locks_probe SET touched_by = touched_by || 'other'::text WHERE id = 2")
        conn.commit()
    done.set()


def test_the_deadlock_victim_is_run_again_and_commits_once(schema):
    _table(schema)
    holding, work_waits, done = threading.Event(), threading.Event(), threading.Event()
    other = threading.Thread(target=_other_side, args=(schema, holding, work_waits, done))
    runs = []

    def work(store: Store) -> int:
        runs.append(len(runs) + 1)
        store.conn.execute("SET LOCAL deadlock_timeout = '200ms'")  # this side looks first: it is the victim
        store.conn.execute("UPDATE locks_probe SET touched_by = touched_by || %s::text WHERE id = 2", (f"work{len(runs)}",))
        if len(runs) == 1:
            work_waits.set()
        store.conn.execute("UPDATE locks_probe SET touched_by = touched_by || %s::text WHERE id = 1", (f"work{len(runs)}",))
        return len(runs)

    with Database(TEST_URL, schema=schema, max_size=2) as db:
        other.start()
        assert holding.wait(10)
        committed_run = db.retrying(work, pause=0.05)
        other.join(10)
    assert done.is_set()
    assert committed_run == 2 and runs == [1, 2]
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as conn:
        rows = dict(conn.execute("SELECT id, touched_by FROM locks_probe ORDER BY id").fetchall())
    # The first run left nothing behind: only the other side's writes and the second run's are there.
    assert rows == {1: ["other", "work2"], 2: ["other", "work2"]}


def test_a_victim_every_time_gives_up_after_the_attempts_with_the_servers_error(db):
    calls = []

    def always_a_victim(store: Store) -> None:
        calls.append(1)
        store.conn.execute("DO $$ BEGIN RAISE EXCEPTION 'victim' USING ERRCODE = '40P01'; END $$")

    with pytest.raises(psycopg.errors.DeadlockDetected):
        db.retrying(always_a_victim, attempts=3, pause=0.01)
    assert len(calls) == 3


def test_other_errors_are_not_run_again(db):
    calls = []

    def broken(store: Store) -> None:
        calls.append(1)
        store.conn.execute("SELECT 1/0")

    with pytest.raises(psycopg.errors.DivisionByZero):
        db.retrying(broken)
    assert calls == [1]
