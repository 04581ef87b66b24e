"""The simulator's own upkeep: autovacuum on the virtual clock, one dedicated connection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.dbutil import TEST_URL
from tests.helpers import create_run, make_workflow
from tickwarden.db import DedicatedDatabase
from tickwarden.simulate.engine import SimulatedAutovacuum

NOW = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.fixture
def dedicated(schema):
    database = DedicatedDatabase(TEST_URL, schema=schema)
    yield database
    database.close()


def reltuples(db, table: str) -> float:
    with db.transaction() as store:
        return store.conn.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (table,)).fetchone()[0]


def test_autovacuum_analyzes_once_the_ledger_grew_by_autovacuums_rule(db, clock):
    rows = {"count": 0}
    upkeep = SimulatedAutovacuum(db, lambda: rows["count"])
    wf = make_workflow(db, clock.now())
    for minute in range(60):
        create_run(db, wf, clock.now() + timedelta(minutes=minute), clock.now())
    rows["count"] = 40  # under 50 rows: nothing yet
    assert upkeep.run_once(NOW) == NOW + timedelta(minutes=1)
    assert upkeep.passes == 0 and reltuples(db, "runs") <= 0
    rows["count"] = 60
    upkeep.run_once(NOW + timedelta(minutes=1))
    assert upkeep.passes == 1 and reltuples(db, "runs") == 60
    rows["count"] = 60 + 50 + 6  # 50 plus 10 % of the 60 analyzed last time: not more
    upkeep.run_once(NOW + timedelta(minutes=2))
    assert upkeep.passes == 1
    rows["count"] += 1
    upkeep.run_once(NOW + timedelta(minutes=3))
    assert upkeep.passes == 2


def test_the_dedicated_connection_is_lent_to_one_borrower_at_a_time(dedicated):
    with dedicated.connection():
        with pytest.raises(RuntimeError, match="already lent"):
            with dedicated.connection():
                pass
    with dedicated.transaction() as store:  # lent again once returned
        assert store.conn.execute("SELECT 1").fetchone() == (1,)


def test_a_transaction_left_open_is_rolled_back_when_the_connection_returns(dedicated, schema):
    with dedicated.connection() as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('left', 'left', %s)", (NOW,))
    with dedicated.probe() as store:
        assert store.conn.execute("SELECT count(*) FROM tenants").fetchone() == (0,)


def test_a_closed_dedicated_connection_is_opened_again(dedicated):
    with dedicated.connection() as conn:
        conn.close()
    with dedicated.probe() as store:
        assert store.conn.execute("SELECT 2").fetchone() == (2,)


def test_the_dedicated_connection_uses_its_schema(dedicated, schema):
    with dedicated.probe() as store:
        assert store.conn.execute("SELECT current_schema()").fetchone() == (schema,)


def test_a_simulations_tables_are_unlogged_scratch_with_their_foreign_keys_intact():
    from tickwarden.simulate import Simulation, parse_scenario

    scenario = parse_scenario({"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T01:00:00Z", "tenants": ["acme"],
                               "workflows": [{"tenant": "acme", "name": "sync", "cron": "*/5 * * * *"}]},
                              source="test")
    simulation = Simulation(scenario, url=TEST_URL)
    simulation._create_schema(TEST_URL)
    try:
        with psycopg.connect(TEST_URL) as conn:
            rows = conn.execute(
                "SELECT relname, relpersistence FROM pg_class"
                " WHERE relnamespace = %s::regnamespace AND relkind = 'r'", (simulation.schema,)).fetchall()
            foreign_keys = conn.execute(
                "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND connamespace = %s::regnamespace",
                (simulation.schema,)).fetchone()[0]
        assert {"runs", "attempts", "alerts", "notification_outbox"} <= {name for name, _ in rows}
        assert {persistence for _, persistence in rows} == {"u"}
        assert foreign_keys > 10
    finally:
        simulation._drop_schema(TEST_URL)
