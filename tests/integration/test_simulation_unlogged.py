"""The simulator's scratch tables: every table a simulation writes after its set-up is unlogged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.dbutil import TEST_URL
from tests.integration.test_simulation_golden import fleet
from tickwarden.simulate import load_scenario, run_policy
from tickwarden.simulate.engine import Simulation

ACCEPTANCE = Path(__file__).resolve().parents[1] / "acceptance" / "scenarios"


def logged_tables(schema: str) -> dict[str, int]:
    """The logged tables of `schema` (partitioned parents hold no rows) with their sizes in bytes."""
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        return dict(conn.execute(
            "SELECT relname, pg_relation_size(oid) FROM pg_class"
            " WHERE relnamespace = %s::regnamespace AND relkind = 'r' AND relpersistence = 'p'", (schema,)))


def rows_written_since(schema: str, table: str, xid: int) -> int:
    """Rows of `table` inserted or updated by a transaction that began after `xid` (row-level security lifted)."""
    with psycopg.connect(TEST_URL, autocommit=True) as conn:
        conn.execute("SET tickwarden.platform = 'on'")
        query = sql.SQL("SELECT count(*) FROM {} WHERE xmin::text::bigint > %s").format(sql.Identifier(schema, table))
        return int(conn.execute(query, (xid,)).fetchone()[0])


@pytest.mark.parametrize("case", ["everything", "checkins", "fleet"])
def test_no_table_a_simulation_writes_after_its_set_up_stayed_logged(case, monkeypatch):
    scenario = fleet(40, 26) if case == "fleet" else load_scenario(ACCEPTANCE / f"{case}.yaml")
    seen: dict[str, Any] = {}
    set_up, collect = Simulation._set_up, Simulation._collect

    def recorded_set_up(self, db, plan):  # type: ignore[no-untyped-def]
        done = set_up(self, db, plan)
        with psycopg.connect(TEST_URL, autocommit=True) as conn:
            seen["xid"] = int(conn.execute("SELECT txid_current() % 4294967296").fetchone()[0])
        seen["sizes"] = logged_tables(self.schema)
        return done

    def checked_collect(self, db, setup):  # type: ignore[no-untyped-def]
        seen["grew"] = sorted(name for name, size in logged_tables(self.schema).items()
                              if size != seen["sizes"].get(name))
        seen["written"] = sorted(name for name in seen["sizes"]
                                 if rows_written_since(self.schema, name, seen["xid"]))
        return collect(self, db, setup)

    monkeypatch.setattr(Simulation, "_set_up", recorded_set_up)
    monkeypatch.setattr(Simulation, "_collect", checked_collect)
    outcome = run_policy(scenario, "tickwarden", url=TEST_URL)
    assert outcome.runs, "the scenario ran"
    # the catalog and the tables of what the simulator never drives stay logged: unlogging
    # them was a rewrite and a sync to disk of each one's files, for rows never written
    assert {"workflows", "schedules", "users", "api_tokens", "tenant_secrets", "checkin_keys"} <= set(seen["sizes"])
    assert seen["grew"] == [] and seen["written"] == []
