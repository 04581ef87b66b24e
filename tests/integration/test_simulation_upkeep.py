"""The simulator's own upkeep: autovacuum on the virtual clock, one dedicated connection."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg.pq import Trace

from tests.dbutil import TEST_URL
from tests.helpers import create_run, make_workflow
from tickwarden.db import DedicatedDatabase
from tickwarden.simulate.engine import SimulatedAutovacuum
from tickwarden.simulate.simulation import SimulationRepository

NOW = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.fixture
def dedicated(schema):
    database = DedicatedDatabase(TEST_URL, schema=schema)
    yield database
    database.close()


@contextlib.contextmanager
def traced(dedicated, path: Path) -> Iterator[None]:
    """What the dedicated connection sends while the block runs, in libpq's trace at `path`."""
    with path.open("w") as sink:
        with dedicated.probe() as store:  # a probe sends nothing until it reads
            store.conn.pgconn.trace(sink.fileno())
            store.conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        try:
            yield
        finally:
            with dedicated.probe() as store:
                store.conn.pgconn.untrace()


def waits(sent: str) -> list[str]:
    """The messages of a trace after which the client waits for the server: its round trips."""
    return [line.split("\t")[2] for line in sent.splitlines()
            if line.startswith("F\t") and line.split("\t")[2] in ("Flush", "Sync", "Query")]


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
    assert upkeep.passes == 0 and reltuples(db, "runs_default") <= 0
    rows["count"] = 60
    upkeep.run_once(NOW + timedelta(minutes=1))
    assert upkeep.passes == 1 and reltuples(db, "runs_default") == 60
    rows["count"] = 60 + 50 + 6  # 50 plus 10 % of the 60 analyzed last time: not more
    upkeep.run_once(NOW + timedelta(minutes=2))
    assert upkeep.passes == 1
    rows["count"] += 1
    upkeep.run_once(NOW + timedelta(minutes=3))
    assert upkeep.passes == 2


def test_autovacuum_vacuums_every_written_table_and_analyzes_only_those_that_changed_enough(db, clock):
    """A pass's ANALYZE follows each table's own rows since its last ANALYZE (50 plus 10 %), as autovacuum's
    does; the pass itself follows the runs created."""
    rows = {"count": 60}
    upkeep = SimulatedAutovacuum(db, lambda: rows["count"])
    wf = make_workflow(db, clock.now())
    for minute in range(60):
        create_run(db, wf, clock.now() + timedelta(minutes=minute), clock.now())
    upkeep.run_once(NOW)  # 60 rows, analyzed empty at set-up: analyzed
    assert upkeep.passes == 1 and upkeep.analyzed["runs_default"] == 1 and upkeep.rows_at_analyze["runs_default"] == 60
    for minute in range(60, 70):
        create_run(db, wf, clock.now() + timedelta(minutes=minute), clock.now())
    rows["count"] = 200  # a pass is due, but the table grew by 10 rows only: vacuumed, not analyzed
    upkeep.run_once(NOW + timedelta(minutes=1))
    assert upkeep.passes == 2 and upkeep.visited["runs_default"] == 2 and upkeep.analyzed["runs_default"] == 1
    assert reltuples(db, "runs_default") == 70  # as the VACUUM counted them
    for minute in range(70, 127):  # 50 + 6 more than the 60 of its last ANALYZE, and one
        create_run(db, wf, clock.now() + timedelta(minutes=minute), clock.now())
    rows["count"] = 400
    upkeep.run_once(NOW + timedelta(minutes=2))
    assert upkeep.passes == 3 and upkeep.visited["runs_default"] == 3 and upkeep.analyzed["runs_default"] == 2
    assert upkeep.rows_at_analyze["runs_default"] == 127


def test_autovacuum_analyzes_a_table_that_shrank_enough(db, clock):
    upkeep = SimulatedAutovacuum(db, lambda: 0)
    upkeep.rows_at_analyze["runs_default"] = 200.0
    assert upkeep.moved("runs_default", 200 - 71) and not upkeep.moved("runs_default", 200 - 70)
    assert upkeep.moved("attempt_queue", 51) and not upkeep.moved("attempt_queue", 50)  # never analyzed: from 0


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
                "SELECT relname, relkind, relpersistence FROM pg_class"
                " WHERE relnamespace = %s::regnamespace AND relkind IN ('r', 'p')", (simulation.schema,)).fetchall()
            references = conn.execute(
                "SELECT r.relname, t.relname FROM pg_constraint k JOIN pg_class r ON r.oid = k.conrelid"
                "  JOIN pg_class t ON t.oid = k.confrelid"
                " WHERE k.contype = 'f' AND k.connamespace = %s::regnamespace", (simulation.schema,)).fetchall()
            foreign_keys = conn.execute(
                "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND connamespace = %s::regnamespace",
                (simulation.schema,)).fetchone()[0]
        kinds = {name: kind for name, kind, _ in rows}
        persistence = {name: value for name, _, value in rows}
        # what a partitioned parent references, and what that references, stays logged
        # (PostgreSQL 15 cannot unlog a parent, nor a table a logged table references)
        held = {name for name, kind in kinds.items() if kind == "p"}
        while grown := {t for r, t in references if r in held and t not in held}:
            held |= grown
        assert {"runs", "attempts", "alerts", "notification_outbox"} <= set(kinds)
        # the ledger's parents are partitioned and stay logged; their month partitions are scratch
        assert kinds["runs"] == kinds["attempts"] == "p"
        assert {persistence[n] for n in kinds if n.startswith(("runs_", "attempts_"))} == {"u"}
        # the loops' tables are unlogged, and so is every table that references one (a logged
        # table cannot reference an unlogged one); the catalog and the tables of what the
        # simulator never drives stay logged (`test_simulation_unlogged`: none is written)
        assert persistence["alerts"] == persistence["notification_outbox"] == persistence["attempt_queue"] == "u"
        assert persistence["ack_link_uses"] == "u"  # it references alerts
        assert persistence["api_tokens"] == persistence["tenant_secrets"] == persistence["schedules"] == "p"
        assert not {(r, t) for r, t in references if kinds[r] == "r" and persistence[r] == "p" and persistence[t] == "u"}
        assert not held & {n for n in kinds if persistence[n] == "u"}
        assert foreign_keys > 10
    finally:
        simulation._drop_schema(TEST_URL)


def schema_exists(name: str) -> bool:
    with psycopg.connect(TEST_URL) as conn:
        return conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (name,)).fetchone()[0]


def test_a_simulations_schema_is_created_whole_or_not_at_all(monkeypatch):
    from tickwarden.simulate import Simulation, engine, parse_scenario

    scenario = parse_scenario({"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T01:00:00Z", "tenants": ["acme"],
                               "workflows": [{"tenant": "acme", "name": "sync", "cron": "*/5 * * * *"}]},
                              source="test")
    monkeypatch.setattr(engine, "queries", lambda: {"simulation_unlog_tables": "SELECT 1 / 0"})  # fails last
    simulation = Simulation(scenario, url=TEST_URL)
    try:
        with pytest.raises(psycopg.errors.DivisionByZero):
            simulation._create_schema(TEST_URL)
        assert not schema_exists(simulation.schema)  # the schema and its migrations went with the failure
    finally:
        simulation._drop_schema(TEST_URL)


def test_a_simulation_refused_while_its_schema_is_being_built_leaves_no_schema_behind():
    from tickwarden.errors import InvalidPolicy
    from tickwarden.simulate import Simulation, parse_scenario

    scenario = parse_scenario({"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T01:00:00Z", "tenants": ["acme"],
                               "workflows": [{"tenant": "acme", "name": "sync", "cron": "*/5 * * * *"}]},
                              source="test")
    # the policy is refused while the schema is being built: the run waits for it, then drops it
    simulation = Simulation(scenario, url=TEST_URL, overrides={"alert_after": 5, "escalate_after": 2})
    with pytest.raises(InvalidPolicy):
        simulation.run()
    assert simulation.db is None  # refused before the first pass: nothing connected to the schema
    assert not schema_exists(simulation.schema)


def test_a_dedicated_transaction_is_pipelined_and_reads_each_result_at_its_statement(dedicated):
    with dedicated.transaction() as store:
        # BEGIN goes out with the first statement, not on its own round trip
        assert store.conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
        tenant = store.catalog.upsert_tenant("acme", NOW)
        store.secrets.upsert_secret(tenant.id, "token", "k1", b"sealed", NOW)
        # a row count, like rows, is there when the statement returns
        assert store.secrets.delete_secret(tenant.id, "token") is True
        assert store.secrets.delete_secret(tenant.id, "token") is False
    with pytest.raises(psycopg.errors.UndefinedTable):
        with dedicated.transaction() as store:
            store.catalog.upsert_tenant("rolled-back", NOW)
            store.conn.execute("SELECT * FROM no_such_table").fetchall()
    with dedicated.probe() as store:
        names = [row[0] for row in store.conn.execute("SELECT name FROM tenants ORDER BY name").fetchall()]
    assert names == ["acme"]  # the first transaction committed, the failed one rolled back whole


def test_a_transaction_block_inside_a_dedicated_transaction_is_a_savepoint(dedicated):
    with pytest.raises(psycopg.errors.UndefinedTable):
        with dedicated.transaction() as store:
            store.catalog.upsert_tenant("kept", NOW)
            try:
                with store.conn.transaction():  # a savepoint: rolling it back keeps what came before
                    store.catalog.upsert_tenant("undone", NOW)
                    store.conn.execute("SELECT * FROM no_such_table").fetchall()
            except psycopg.errors.UndefinedTable:
                pass
            store.catalog.upsert_tenant("after", NOW)
            with store.conn.transaction():  # released, not committed: the enclosing transaction goes on
                store.catalog.upsert_tenant("released", NOW)
            store.conn.execute("SELECT * FROM no_such_table").fetchall()
    with dedicated.transaction() as store:
        store.catalog.upsert_tenant("kept", NOW)
        with store.conn.transaction():
            store.catalog.upsert_tenant("inner", NOW)
    with dedicated.probe() as store:
        names = [row[0] for row in store.conn.execute("SELECT name FROM tenants ORDER BY name").fetchall()]
    assert names == ["inner", "kept"]  # the first transaction rolled back whole, savepoint and all


def test_every_borrow_of_the_dedicated_connection_is_a_transaction_of_one_kept_pipeline(dedicated, schema):
    with dedicated.transaction() as store:
        store.catalog.upsert_tenant("acme", NOW)
    for borrow in (dedicated.probe, dedicated.autocommit):
        with borrow() as store:
            # the previous COMMIT has not cost a round trip of its own: it goes out with this read
            assert store.conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
            assert store.conn.execute("SELECT count(*) FROM tenants").fetchone() == (1,)
    with pytest.raises(psycopg.errors.UndefinedTable):
        with dedicated.autocommit() as store:
            store.catalog.upsert_tenant("undone", NOW)
            store.conn.execute("SELECT * FROM no_such_table").fetchall()
    with dedicated.maintenance() as store:  # outside the pipeline: VACUUM may run
        assert store.conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
        store.conn.execute("VACUUM tenants")
    dedicated.close()  # the last commits land before the connection closes
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as other:
        assert [r[0] for r in other.execute("SELECT name FROM tenants ORDER BY name").fetchall()] == ["acme"]


def test_the_dedicated_connection_lends_one_store_until_it_is_opened_again(dedicated):
    with dedicated.transaction() as first:
        pass
    for borrow in (dedicated.probe, dedicated.autocommit, dedicated.maintenance):
        with borrow() as store:
            assert store is first
    dedicated.close()
    with dedicated.probe() as store:  # a new connection: a store bound to it
        assert store is not first and store.conn is not first.conn and store.ledger.conn is store.conn


def test_a_dedicated_probe_sends_its_read_alone_with_no_transaction_of_its_own(dedicated, tmp_path):
    trace = tmp_path / "trace"
    with traced(dedicated, trace):
        with dedicated.probe() as store:
            assert store.conn.execute("SELECT count(*) FROM tenants").fetchone() == (0,)
    sent = trace.read_text(errors="replace")
    assert waits(sent) == ["Flush"] and "SELECT count(*) FROM tenants" in sent
    assert "BEGIN" not in sent and "COMMIT" not in sent
    with pytest.raises(psycopg.errors.UndefinedTable):
        with dedicated.probe() as store:
            store.conn.execute("SELECT * FROM no_such_table").fetchall()
    with dedicated.probe() as store:  # the failed look left nothing behind
        assert store.conn.execute("SELECT count(*) FROM tenants").fetchone() == (0,)


def test_writes_sent_ahead_commit_or_roll_back_with_the_next_borrows_transaction(dedicated, schema, tmp_path):
    def names() -> list[str]:
        with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as other:
            return [r[0] for r in other.execute("SELECT name FROM tenants ORDER BY name").fetchall()]

    trace = tmp_path / "trace"
    with traced(dedicated, trace):
        with dedicated.ahead() as conn:  # no BEGIN, no COMMIT, no round trip of its own
            assert conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
            conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('ahead', 'ahead', %s)", (NOW,))
        with dedicated.probe() as store:  # the next borrow sees the write and commits it (a probe then is a transaction)
            assert store.conn.execute("SELECT count(*) FROM tenants").fetchone() == (1,)
    assert waits(trace.read_text(errors="replace")) == ["Flush"]
    with dedicated.ahead() as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('undone', 'undone', %s)", (NOW,))
    with pytest.raises(psycopg.errors.UndefinedTable):
        with dedicated.transaction() as store:  # fails: what was sent ahead rolls back with it
            store.conn.execute("SELECT * FROM no_such_table").fetchall()
    with dedicated.ahead() as conn:  # left before any borrow: the pipeline's sync commits it
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('synced', 'synced', %s)", (NOW,))
    dedicated.close()
    assert names() == ["ahead", "synced"]


def test_a_commit_and_an_unread_wake_up_cost_the_dedicated_connection_no_round_trip(dedicated, tmp_path):
    trace = tmp_path / "trace"
    with traced(dedicated, trace):
        with dedicated.transaction() as store:
            store.catalog.upsert_tenant("acme", NOW)  # read: the one wait of this transaction
            store.trigger.notify_wake("ticker")  # nobody reads it
        with dedicated.probe() as store:  # the COMMIT and the wake-up go out with this read
            assert store.conn.execute("SELECT count(*) FROM tenants").fetchone() == (1,)
    assert waits(trace.read_text(errors="replace")) == ["Flush", "Flush"]


def test_autovacuum_processes_partitions_and_never_their_partitioned_table(db, clock, dedicated):
    wf = make_workflow(db, clock.now())
    for minute in range(3):
        create_run(db, wf, clock.now() + timedelta(minutes=minute), clock.now())
    with dedicated.maintenance() as store:
        repository = SimulationRepository(store.conn)
        repository.analyze()  # the catalog's statistics, as a simulation's set-up takes them
        written = {row["tablename"] for row in repository._rows("simulation_tables_written")}
        for minute in range(3, 5):
            create_run(db, wf, clock.now() + timedelta(minutes=minute), clock.now())
        repository.vacuum()
    # as autovacuum: the partitions that hold rows, never the partitioned table (analyzing it
    # would sample its partitions' rows a second time); nor, in this schema where every table
    # stayed logged, the catalog (a simulation's loops write only unlogged tables and partitions)
    assert {"runs_default", "attempts_default"} <= written
    assert not written & {"runs", "attempts", "tenants", "workflows", "schedule_fires"}
    assert reltuples(db, "runs_default") == 5 and reltuples(db, "runs") == 3


def test_a_simulations_session_commits_without_waiting_for_the_wal_flush_keeps_generic_plans_and_samples_little():
    from tickwarden.simulate import Simulation, parse_scenario

    scenario = parse_scenario({"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T00:10:00Z", "tenants": ["acme"],
                               "workflows": [{"tenant": "acme", "name": "sync", "cron": "*/5 * * * *"}]},
                              source="test")
    url = psycopg.conninfo.make_conninfo(TEST_URL, options="-c statement_timeout=54321")
    simulation = Simulation(scenario, url=url)
    outcome = simulation.run()
    assert len(outcome.runs) == 2
    assert simulation.db is not None
    try:
        with simulation.db.probe() as store:  # the closed connection opens again, with the same options
            assert store.conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
            assert store.conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
            assert store.conn.execute("SHOW default_statistics_target").fetchone() == ("10",)
            assert store.conn.execute("SHOW statement_timeout").fetchone() == ("54321ms",)  # the URL's own kept
        with simulation.db.probe() as store:  # a connection option, not a SET: even a RESET keeps it
            store.conn.execute("RESET synchronous_commit")
            assert store.conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
    finally:
        simulation.db.close()


def test_autovacuum_leaves_out_a_table_no_row_ever_reached(db, clock, dedicated):
    wf = make_workflow(db, clock.now())
    create_run(db, wf, clock.now(), clock.now())
    with dedicated.maintenance() as store:
        # unlogged, as the tables a simulation's loops write (only those are visited)
        store.conn.execute("CREATE UNLOGGED TABLE probe_empty (x int)")
        store.conn.execute("CREATE UNLOGGED TABLE probe_emptied (x int)")
        try:
            store.conn.execute("INSERT INTO probe_emptied VALUES (1)")
            store.conn.execute("DELETE FROM probe_emptied")  # its page stays: it is vacuumed and analyzed
            repository = SimulationRepository(store.conn)
            written = {row["tablename"] for row in repository._rows("simulation_tables_written")}
            repository.vacuum()
            never = store.conn.execute(
                "SELECT relname, reltuples FROM pg_class WHERE relname IN ('probe_empty', 'probe_emptied')"
                " AND relnamespace = current_schema()::regnamespace ORDER BY relname").fetchall()
        finally:
            store.conn.execute("DROP TABLE probe_empty, probe_emptied")
    assert {"runs_default", "probe_emptied"} <= written
    assert "probe_empty" not in written
    assert not written & {"workflows", "tenants"}  # logged: the catalog, analyzed once loaded
    # -1: never vacuumed nor analyzed; 0: the pass went over the emptied table
    assert never == [("probe_emptied", 0.0), ("probe_empty", -1.0)]
    assert reltuples(db, "runs_default") == 1


def test_a_savepoint_inside_a_dedicated_transaction_costs_no_round_trip_of_its_own(dedicated, tmp_path):
    trace = tmp_path / "trace"
    with traced(dedicated, trace):
        with dedicated.transaction() as store:
            store.catalog.upsert_tenant("acme", NOW)  # read: BEGIN goes with it
            with store.conn.transaction():  # SAVEPOINT goes with the next read, RELEASE with the one after
                store.catalog.upsert_tenant("inner", NOW)
        with dedicated.probe() as store:
            assert store.conn.execute("SELECT count(*) FROM tenants").fetchone() == (2,)
    sent = trace.read_text(errors="replace")
    assert waits(sent) == ["Flush", "Flush", "Flush"]
    assert "SAVEPOINT" in sent and "RELEASE" in sent


def tenants(dedicated) -> list[str]:
    with dedicated.probe() as store:
        return [name for (name,) in store.conn.execute("SELECT name FROM tenants ORDER BY name")]


def test_a_failing_statement_in_a_dedicated_savepoint_rolls_back_the_savepoint_alone(dedicated):
    with dedicated.transaction() as store:
        store.catalog.upsert_tenant("acme", NOW)
        with pytest.raises(psycopg.errors.NumericValueOutOfRange), store.conn.transaction():
            store.catalog.upsert_tenant("inner", NOW)
            store.conn.execute("SELECT 2147483647::int + 1").fetchone()  # the error surfaces at this read
        store.catalog.upsert_tenant("after", NOW)  # the transaction goes on after the rollback to the savepoint
    assert tenants(dedicated) == ["acme", "after"]


def test_a_dedicated_savepoint_keeps_psycopgs_rollback_and_force_rollback(dedicated):
    with dedicated.transaction() as store:
        store.catalog.upsert_tenant("acme", NOW)
        with store.conn.transaction() as tx:
            store.catalog.upsert_tenant("rolled-back", NOW)
            raise psycopg.Rollback(tx)  # swallowed by its own block, as psycopg's
        with store.conn.transaction(force_rollback=True):
            store.catalog.upsert_tenant("forced", NOW)
        with pytest.raises(psycopg.Rollback), store.conn.transaction():
            raise psycopg.Rollback(psycopg.Transaction(store.conn, "elsewhere"))  # aimed at another block
    assert tenants(dedicated) == ["acme"]


def test_a_simulations_catalog_is_published_in_round_trips_that_do_not_grow_with_its_workflows(dedicated, tmp_path):
    from tickwarden.simulate import Simulation, parse_scenario

    workflows = [{"tenant": "acme", "name": f"sync-{i}", "cron": f"{i} * * * *"} for i in range(40)]
    scenario = parse_scenario({"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T01:00:00Z", "tenants": ["acme"],
                               "workflows": workflows}, source="test")
    trace = tmp_path / "trace"
    with traced(dedicated, trace):
        simulation = Simulation(scenario, url=TEST_URL)
        setup = simulation._set_up(dedicated, simulation._plan_catalog())
    assert len(setup.workflow_ids) == 40
    with dedicated.probe() as store:
        assert store.conn.execute("SELECT count(*) FROM schedule_fires WHERE next_fire_at IS NOT NULL").fetchone() \
            == (40,)
    # the platform's channel and the tenant, then one round trip each for the workflows' locks
    # (with the tenant's channel), the workflows and their schedules (not three per workflow),
    # then the ANALYZE
    assert len(waits(trace.read_text(errors="replace"))) == 5


def test_a_notifier_pass_sends_its_unread_statements_with_the_next_read(db, dedicated, tmp_path):
    """On the dedicated connection a pass waits only where it reads: nothing is released when
    the look found nothing to release, the claim's tick facts go out with the claim, and a
    first message's thread and its relaxed commit are the record's own statement."""
    from tests.integration.notify_builders import add_channel, open_alert, outbox
    from tickwarden.notifier import Notifier
    from tickwarden.transports.recording import RecordingTransport

    add_channel(db, NOW, tenant="acme", name="rec", kind="recording", audience="customer")
    open_alert(db, NOW)
    recorder = RecordingTransport()
    # one round: the message is recorded in a transaction of its own, after the send
    notifier = Notifier(dedicated, "n1", {"recording": recorder}, rounds=1)
    trace = tmp_path / "trace"
    with traced(dedicated, trace):
        notifier.run_once(NOW + timedelta(seconds=1))
    assert len(recorder.messages) == 1 and notifier.last_pass.sent == 1
    [row] = outbox(db)
    assert row["status"] == "sent"
    with dedicated.probe() as store:
        assert store.conn.execute("SELECT count(*) FROM notification_threads").fetchone() == (1,)
    # the look; the claim with its context and the tick facts; the look for the next wake-up, which
    # carries the record (with the thread and the relaxed commit), read after it: 3 (4 when the
    # record was read at once)
    assert len(waits(trace.read_text(errors="replace"))) == 3


def test_a_dedicated_transaction_opens_the_next_so_only_the_first_sends_begin(dedicated, schema, tmp_path):
    """COMMIT AND CHAIN ends each transaction: committed for everyone, and no BEGIN for the next."""
    trace = tmp_path / "trace"
    with traced(dedicated, trace):
        for name in ("a", "b", "c"):
            with dedicated.transaction() as store:
                store.catalog.upsert_tenant(name, NOW)
        with dedicated.probe() as store:  # the last COMMIT AND CHAIN goes out with this read
            assert store.conn.execute("SELECT count(*) FROM tenants").fetchone() == (3,)
            pid = store.conn.info.backend_pid
    parsed = [line.split("\t")[3].split('"')[3] for line in trace.read_text(errors="replace").splitlines()
              if line.startswith("F\t") and line.split("\t")[2] == "Parse"]
    assert parsed.count("BEGIN") == 1 and parsed.count("COMMIT AND CHAIN") == 3 and "COMMIT" not in parsed
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as other:
        assert [r[0] for r in other.execute("SELECT name FROM tenants ORDER BY name").fetchall()] == ["a", "b", "c"]
        # between borrows the open transaction has no id: what it wrote is committed, and it holds no
        # row lock (a snapshot it may hold until the pipeline syncs, as the implicit transaction did)
        assert other.execute("SELECT backend_xid FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == (None,)
    with dedicated.maintenance() as store:  # leaving the pipeline commits the open transaction: VACUUM may run
        store.conn.execute("VACUUM tenants")
    with dedicated.transaction() as store:  # back in the pipeline: a BEGIN of its own again
        store.catalog.upsert_tenant("d", NOW)
    dedicated.close()
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as other:
        assert other.execute("SELECT count(*) FROM tenants").fetchone() == (4,)


def test_a_simulated_autovacuum_pass_reads_its_tables_with_the_sync_that_leaves_the_pipeline(db, clock, dedicated,
                                                                                             tmp_path):
    wf = make_workflow(db, clock.now())
    for minute in range(60):
        create_run(db, wf, clock.now() + timedelta(minutes=minute), clock.now())
    upkeep = SimulatedAutovacuum(dedicated, lambda: 60)
    trace = tmp_path / "trace"
    with traced(dedicated, trace):
        upkeep.run_once(NOW)
    sent = trace.read_text(errors="replace")
    assert upkeep.passes == 1 and reltuples(db, "runs_default") == 60
    # the sync leaving pipeline mode, which brings the table list sent
    # before it, and the VACUUM; no statement of its own for the list outside the pipeline. Then
    # the rows that VACUUM counted, and the ANALYZE of the tables that moved enough (the 60 runs)
    # psycopg follows the Sync with a Flush request only when the sync's results are not in yet
    # (a matter of timing): that Flush asks for nothing the Sync does not bring
    trips = [w for i, w in enumerate(waits(sent)) if not (w == "Flush" and i and waits(sent)[i - 1] == "Sync")]
    assert trips == ["Sync", "Query", "Sync", "Query"], waits(sent)
    assert sent.index("pg_relation_size") < sent.index("\tSync") < sent.index("VACUUM") < sent.index("reltuples")
    assert sent.index("reltuples") < sent.index("ANALYZE") and upkeep.analyzed["runs_default"] == 1


class RolledBack(Exception):
    """Raised to leave a transaction without committing what it made."""


def test_autovacuum_visits_the_partitions_and_unlogged_tables_and_never_a_logged_table(db):
    """The catalog (logged, written once at set-up, analyzed then) is never visited again;
    a month partition is, logged or not: one the retention creates mid-run takes the loops' rows."""
    from tests.helpers import publish, tick

    seen: dict[str, set[str]] = {}
    with pytest.raises(RolledBack), db.transaction() as store:  # nothing of it outlives the test
        tenant = store.catalog.upsert_tenant("acme", NOW)
        wf = publish(store, tenant.id, "nightly", NOW)
        store.ledger.create_tick_run(tick(wf, NOW - timedelta(days=40)), NOW)  # no partition: runs_default
        store.conn.execute("SELECT tickwarden_ledger_partition(%s)", (NOW,))  # runs_p202611, logged
        store.ledger.create_tick_run(tick(wf, NOW), NOW)
        store.conn.execute("CREATE UNLOGGED TABLE probe_scratch (x int)")
        store.conn.execute("INSERT INTO probe_scratch VALUES (1)")
        persistence = dict(store.conn.execute(
            "SELECT relname, relpersistence FROM pg_class WHERE relname IN ('runs_p202611', 'tenants')"
            " AND relnamespace = current_schema()::regnamespace").fetchall())
        seen["written"] = {row["tablename"] for row in SimulationRepository(store.conn)._rows("simulation_tables_written")}
        raise RolledBack
    assert persistence == {"runs_p202611": "p", "tenants": "p"}
    assert {"runs_default", "runs_p202611", "probe_scratch"} <= seen["written"]
    assert not seen["written"] & {"tenants", "workflows", "schedules", "schedule_fires", "runs"}


def test_a_simulated_days_autovacuum_visits_only_the_tables_its_loops_write(monkeypatch):
    """Each pass vacuums the ledger's partitions and the loops' tables, never the catalog, and analyzes those that
    changed enough."""
    from tests.integration.test_simulation_golden import fleet
    from tickwarden.simulate import run_policy

    made: list[SimulatedAutovacuum] = []
    init = SimulatedAutovacuum.__init__

    def recorded(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(SimulatedAutovacuum, "__init__", recorded)
    outcome = run_policy(fleet(40, 26), "tickwarden", url=TEST_URL)
    assert outcome.runs
    upkeep = made[0]
    assert upkeep.passes > 0 and upkeep.visited["runs_default"] == upkeep.passes
    assert not set(upkeep.visited) & {"tenants", "workflows", "schedules", "notification_channels",
                                      "schema_migrations", "maintenance_windows"}
    # the passes follow the runs created: the same on every run of the scenario
    assert upkeep.passes == 11
    # the ledger, which grows as the runs do, is analyzed at about every pass; a table whose
    # rows hold (a fire and an audit a workflow, 40 rows) at none: vacuumed only
    assert {table: upkeep.analyzed[table] for table in EVERY_PASS} == {
        "runs_default": 11, "attempts_default": 10, "schedule_fires": 0, "tick_audits": 0, "workflow_successes": 0}
    assert upkeep.analyzed["attempt_queue"] == upkeep.analyzed["outcome_queue"] == 0
    # and which tables a pass analyzes is decided from the rows its own VACUUM counted: the
    # same on a second run of the scenario
    assert run_policy(fleet(40, 26), "tickwarden", url=TEST_URL).runs == outcome.runs
    assert made[1].passes == 11 and made[1].analyzed == upkeep.analyzed
    # the ledger's partitions and the tables written at every tick, at every pass
    assert {table: upkeep.visited[table] for table in EVERY_PASS} == dict.fromkeys(EVERY_PASS, 11)
    # and nothing but the loops' tables (a catalog table was visited at every pass); how many
    # passes find the queues and alerts holding a page also depends on whether a VACUUM could
    # give an emptied table's pages back, which an older snapshot on a shared server can delay
    assert set(upkeep.visited) <= EVERY_PASS | {
        "attempt_queue", "outcome_queue", "tick_audit_arms", "alerts", "alert_events", "notification_outbox",
        "notification_threads"}


EVERY_PASS = {"runs_default", "attempts_default", "schedule_fires", "tick_audits", "workflow_successes"}


def test_the_connection_that_builds_a_simulations_schema_compiles_nothing(monkeypatch):
    """Its migrations run with JIT off, as every `Database` connection does: none runs long enough to repay a compile."""
    from tickwarden.simulate import Simulation, parse_scenario
    from tickwarden.simulate import engine

    scenario = parse_scenario({"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T00:10:00Z", "tenants": ["acme"],
                               "workflows": [{"tenant": "acme", "name": "sync", "cron": "*/5 * * * *"}]},
                              source="test")
    seen: list[tuple[str, ...]] = []
    real_upgrade = engine.upgrade

    def upgrade(conn, now):
        seen.append(conn.execute("SHOW jit").fetchone())
        return real_upgrade(conn, now)

    monkeypatch.setattr(engine, "upgrade", upgrade)
    simulation = Simulation(scenario, url=TEST_URL)
    simulation._create_schema(TEST_URL)
    try:
        assert seen == [("off",)]
    finally:
        simulation._drop_schema(TEST_URL)
