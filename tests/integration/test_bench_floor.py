"""The simulator's floor writes a simulation's runs and outcomes, and only them, one instant at a time."""

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql

from benchmarks.common import BARE_LEDGER, write_bare_ledger
from tests.dbutil import TEST_URL

T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def scratch():
    name = f"floor_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        try:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
            conn.execute(BARE_LEDGER)
            yield conn
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def _run(id_: int, created: datetime, status: str, attempts: int) -> dict[str, object]:
    return {"tenant": "acme", "workflow": f"wf{id_}", "id": id_, "scheduled_for": created, "manual": False,
            "status": status, "attempts": attempts, "created_at": created,
            "finished_at": None if status == "running" else created + timedelta(seconds=30)}


def test_each_instant_costs_an_insert_and_an_update_and_leaves_the_final_statuses(scratch):
    runs = [_run(1, T0, "succeeded", 1), _run(2, T0, "failed", 3), _run(3, T0 + timedelta(minutes=1), "running", 1),
            _run(4, T0 + timedelta(minutes=2), "missed", 0), _run(5, T0 + timedelta(minutes=1), "succeeded", 2)]
    assert write_bare_ledger(scratch, runs) == 6  # three instants
    assert scratch.execute("SELECT id, workflow, status, finished_at IS NULL FROM runs ORDER BY id").fetchall() == [
        (1, "acme/wf1", "succeeded", False), (2, "acme/wf2", "failed", False), (3, "acme/wf3", "running", True),
        (4, "acme/wf4", "missed", False), (5, "acme/wf5", "succeeded", False)]
    # Each run's attempts, numbered, with its final status; a missed tick has none.
    assert scratch.execute("SELECT run_id, number, status FROM attempts ORDER BY run_id, number").fetchall() == [
        (1, 1, "succeeded"), (2, 1, "failed"), (2, 2, "failed"), (2, 3, "failed"), (3, 1, "running"),
        (5, 1, "succeeded"), (5, 2, "succeeded")]
