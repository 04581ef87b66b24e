"""The simulator's set-up: loading its catalog costs the same statements and round trips whatever the fleet's size."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.pq import Trace

from tests.dbutil import TEST_URL
from tickwarden.db import DedicatedDatabase
from tickwarden.simulate import Simulation, parse_scenario


def fleet(tenants: int, per_tenant: int) -> dict:
    names = [f"t{i}" for i in range(tenants)]
    return {
        "name": "set-up",
        "start": "2026-11-30T00:00:00Z",
        "end": "2026-11-30T01:00:00Z",
        "tenants": names,
        "workflows": [{"tenant": tenant, "name": f"wf{j}", "cron": f"{j % 60} * * * *", "duration": 30}
                      for tenant in names for j in range(per_tenant)],
    }


def set_up_messages(raw: dict, trace: Path) -> tuple[int, int, dict[str, int]]:
    """Statements and round trips of the simulator's catalog load (`Simulation._set_up`), and the rows it wrote."""
    simulation = Simulation(parse_scenario(raw, source="test"), url=TEST_URL)
    simulation._create_schema(TEST_URL)
    try:
        plan = simulation._plan_catalog()
        db = DedicatedDatabase(simulation._session_url(TEST_URL), schema=simulation.schema)
        try:
            with trace.open("w") as out:
                db._conn.pgconn.trace(out.fileno())
                db._conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
                setup = simulation._set_up(db, plan)
                db._conn.pgconn.untrace()
            with db.transaction() as store:
                counts = store.catalog.counts()
        finally:
            db.close()
    finally:
        simulation._drop_schema(TEST_URL)
    assert len(setup.workflow_ids) == len(raw["workflows"])
    sent = [line.split("\t")[2] for line in trace.read_text(errors="replace").splitlines()
            if line.split("\t")[0] == "F" and len(line.split("\t")) > 2]
    statements = sum(1 for message in sent if message in ("Bind", "Query"))
    round_trips = sum(1 for message in sent if message in ("Sync", "Flush", "Query"))  # each waits for the server
    return statements, round_trips, counts


@pytest.fixture(scope="module")
def loads(tmp_path_factory) -> tuple[tuple[int, int, dict[str, int]], tuple[int, int, dict[str, int]]]:
    """(statements, round trips, rows) of a small fleet's catalog load and of a larger one's."""
    trace = tmp_path_factory.mktemp("set-up")
    small, large = set_up_messages(fleet(2, 3), trace / "small"), set_up_messages(fleet(6, 40), trace / "large")
    assert small[2]["workflows"] == small[2]["schedules"] == 6 and small[2]["channels"] == 3
    assert large[2]["workflows"] == large[2]["schedules"] == 240 and large[2]["channels"] == 7
    return small, large


def test_the_catalog_load_is_one_statement_a_stage_for_the_workflows_and_schedules(loads):
    small, large = loads
    # One insert per tenant and per channel (few), but one statement per stage for the
    # workflows and schedules: 234 more workflows and 4 more tenants cost 8 statements,
    # where one statement a workflow a stage cost 3 x 234 more.
    assert large[0] - small[0] == 2 * 4


def test_the_catalog_load_is_a_fixed_number_of_round_trips_whatever_the_fleet(loads):
    small, large = loads
    # The tenants together, their channels together, each publishing stage one.
    assert large[1] == small[1]


@pytest.mark.parametrize("bad, complaint", [
    ({"timeout_seconds": 0}, "workflows_timeout_seconds_check"),
    ({"name": "Not A Name"}, "workflows_name_check"),
    ({"starting_deadline_seconds": 0}, "schedules_starting_deadline_seconds_check"),
])
def test_a_bad_publication_among_many_is_refused_as_alone_and_nothing_is_written(db, clock, bad, complaint):
    from dataclasses import replace

    import psycopg

    from tests.helpers import publish
    from tickwarden import catalog

    with db.transaction() as store:
        tenant = store.catalog.upsert_tenant("acme", clock.now())
        good = store.catalog.get_workflow(publish(store, tenant.id, "good", clock.now()).id)
        schedule = store.catalog.get_schedule_for_workflow(good.id)
        base = catalog.Publication.stored(good, schedule)
    messages = []
    for pubs in ([replace(base, **{"name": "fresh", **bad})],
                 [replace(base, name="other"), replace(base, **{"name": "fresh", **bad}), replace(base, name="more")]):
        with pytest.raises(psycopg.errors.CheckViolation) as refused, db.transaction() as store:
            catalog.publish_all(store, pubs, clock.now(), actor="test")
        assert refused.value.diag.constraint_name == complaint
        messages.append(str(refused.value).splitlines()[0])
    table = complaint.split("_")[0]
    # the sentence the one-row statement gave, alone as among others
    assert messages == [f'new row for relation "{table}" violates check constraint "{complaint}"'] * 2
    with db.transaction() as store:
        assert store.catalog.counts()["workflows"] == store.catalog.counts()["schedules"] == 1
