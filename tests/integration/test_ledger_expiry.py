"""Expiring a month of the ledger: detached in a short transaction, dropped in one of its own."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg

from tests.dbutil import TEST_URL
from tests.integration.pipeline import DAILY, create_tick, workflow
from tests.integration.test_retention import YEAR_START, run_tick
from tickwarden.db import Database
from tickwarden.models import Workflow
from tickwarden.retention import RetentionSweeper
from tickwarden.store.ledger import TickRequest
from tickwarden.store.retention import LedgerMonth

DAY = timedelta(days=1)
LATER = YEAR_START + 500 * DAY  # January and February 2025 are past every retention


def rows(db: Database, query: str, *params: object) -> list[tuple]:
    with db.transaction() as store:
        return store.conn.execute(query, params).fetchall()


def tables(db: Database, kind: str) -> list[str]:
    """The ledger's month tables of the schema that are partitions ("partition") or not ("standalone")."""
    return [r[0] for r in rows(db, "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
                                   " AND relkind = 'r' AND relname ~ '^(runs|attempts|attempt_steps)_p[0-9]{6}$'"
                                   " AND relispartition = %s ORDER BY relname", kind == "partition")]


def ledger(db: Database, workflows: int = 3) -> list[Workflow]:
    """January and February of daily runs; every workflow's newest success is in February."""
    wfs = [workflow(db, YEAR_START, tenant=f"t{i}", name=f"w{i}", cadence=DAILY) for i in range(workflows)]
    RetentionSweeper(db).create_months(YEAR_START)
    for index in range(40):
        for wf in wfs:
            run_tick(db, wf, YEAR_START + index * DAY, True)
    with db.transaction() as store:
        store.conn.execute("ANALYZE runs_p202501, attempts_p202501")
    return wfs


def january(db: Database) -> LedgerMonth:
    with db.transaction() as store:
        (month,) = [m for m in store.retention.ledger_months() if m.suffix == "p202501"]
    return month


def detach_only(db: Database, month: LedgerMonth) -> None:
    """What a pass does before it dies between the detach and the drop."""
    with db.transaction() as store:
        assert store.retention.month_droppable(month, LATER, 400)
    with db.transaction() as store:
        store.retention.lock_ledger()
        assert store.retention.detach_month(month)


def insert_tick(db: Database, wf: Workflow, at: object) -> None:
    """Record a tick the way the ticker does, waiting for no lock longer than 200 ms."""
    with db.transaction() as store:
        store.conn.execute("SET LOCAL lock_timeout = '200ms'")
        assert store.ledger.create_tick_run(TickRequest(wf.tenant_id, wf.id, at, 0, at + DAY), at) is not None


def test_three_loops_at_once_expire_each_month_once_and_leave_no_table_behind(db: Database) -> None:
    ledger(db)
    barrier = threading.Barrier(3)
    passes: list = []
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            sweeper = RetentionSweeper(db)
            barrier.wait()
            passes.append(sweeper.sweep(LATER))
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=sweep) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    expired = sorted(m for p in passes for m in p.months_dropped)
    assert expired == ["p202501", "p202503"], expired  # each by one loop; February holds the newest successes
    assert {m for p in passes for m in p.leftovers_dropped} <= {"p202501", "p202503"}
    assert tables(db, "standalone") == []
    assert "runs_p202501" not in tables(db, "partition") and "runs_p202502" in tables(db, "partition")
    # The row-wise sweep kept each workflow's newest success, in February, and nothing older.
    assert rows(db, "SELECT count(*), min(scheduled_for) FROM runs") == [(3, YEAR_START + 39 * DAY)]


def test_a_loop_finding_a_month_another_detached_drops_it_once_and_neither_fails(db: Database) -> None:
    ledger(db)
    detached, resume = threading.Event(), threading.Event()

    class PausedAfterDetach(RetentionSweeper):
        def _drop_detached(self, suffix: str, phases: dict[str, float]) -> bool:
            if suffix == "p202501":
                detached.set()
                assert resume.wait(60)
            return super()._drop_detached(suffix, phases)

    first: list = []
    errors: list[BaseException] = []

    def run_first() -> None:
        try:
            first.append(PausedAfterDetach(db).drop_months(LATER))
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    thread = threading.Thread(target=run_first)
    thread.start()
    try:
        assert detached.wait(60)
        assert tables(db, "standalone") == ["attempt_steps_p202501", "attempts_p202501", "runs_p202501"]
        second = RetentionSweeper(db).drop_months(LATER)
    finally:
        resume.set()
        thread.join(60)
    assert not errors, errors
    # The second loop dropped January's tables as leftovers; the first found them gone.
    assert second.leftovers == ["p202501"] and second.dropped == ["p202503"]
    assert first[0].dropped == ["p202501"] and first[0].leftovers == []
    assert tables(db, "standalone") == []


def test_a_pass_that_died_between_detach_and_drop_leaves_tables_the_next_pass_drops(db: Database) -> None:
    wfs = ledger(db)
    month = january(db)
    detach_only(db, month)

    # Out of the ledger: no live month lists, reads or erases it any more.
    assert tables(db, "standalone") == ["attempt_steps_p202501", "attempts_p202501", "runs_p202501"]
    assert rows(db, "SELECT count(*) FROM runs WHERE scheduled_for < %s", month.upper) == [(0,)]
    assert rows(db, "SELECT count(*) FROM runs_p202501") == [(3 * 31,)]
    with db.transaction() as store:
        assert "p202501" not in [m.suffix for m in store.retention.ledger_months()]
        assert store.retention.detached_months() == ["p202501"]
        assert not any(t.endswith("_p202501") for t in store.erasure.tenant_tables())
        assert not any(c.table.endswith("_p202501") for c in store.erasure.text_columns())
    with db.transaction() as store:  # a pass that listed the month before the detach
        assert not store.retention.month_droppable(month, LATER, 400)
    with db.transaction() as store:
        store.retention.lock_ledger()
        assert not store.retention.detach_month(month)
    # The detached tables no longer hold tenants or workflows: those are deleted freely.
    assert rows(db, "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND connamespace = current_schema()::regnamespace"
                    " AND conrelid::regclass::text ~ '_p202501$'") == [(2,)]  # each to the month's other table

    result = RetentionSweeper(db).sweep(LATER)
    assert result.leftovers_dropped == ["p202501"]
    assert result.months_dropped == ["p202503"]
    assert tables(db, "standalone") == []
    assert rows(db, "SELECT to_regclass('runs_p202501')") == [(None,)]
    assert rows(db, "SELECT count(*) FROM runs") == [(3,)]  # each workflow's newest success
    insert_tick(db, wfs[0], YEAR_START + 45 * DAY)  # the ledger goes on


def test_while_a_detached_month_waits_or_is_dropped_the_ledger_takes_writes_to_other_months(db: Database) -> None:
    wfs = ledger(db)
    detach_only(db, january(db))
    insert_tick(db, wfs[0], YEAR_START + 50 * DAY)  # while the detached tables wait for their drop
    with db.transaction() as store:
        assert store.retention.drop_detached("p202501")
        # The drop holds its locks until its commit (where the files go): the ledger is not among them.
        insert_tick(db, wfs[1], YEAR_START + 51 * DAY)
        with db.transaction() as other:
            other.conn.execute("SET LOCAL lock_timeout = '200ms'")
            assert other.conn.execute("SELECT count(*) FROM runs").fetchone() == (3 * 9 + 2,)
            other.conn.execute("UPDATE workflows SET updated_at = updated_at WHERE id = %s", (wfs[2].id,))
            other.conn.execute("DELETE FROM tenants WHERE id = %s", (wfs[2].tenant_id,))
    assert tables(db, "standalone") == []
    assert rows(db, "SELECT count(*) FROM runs WHERE workflow_id = %s", wfs[2].id) == [(0,)]


def test_behind_a_long_reader_the_detach_gives_up_and_a_later_pass_expires_the_month(db: Database,
                                                                                     schema: str) -> None:
    ledger(db)
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as reader:
        assert reader.execute("SELECT count(*) FROM runs").fetchone() == (3 * 40,)  # its transaction stays open
        sweeper = RetentionSweeper(db)
        t0 = time.perf_counter()
        assert sweeper.drop_months(LATER).dropped == []
        # Each month waited half a second for the ledger, not for the reader to finish.
        assert time.perf_counter() - t0 < 5
        assert sweeper.last_drop["lock_ms"] >= 2 * 450
        assert tables(db, "standalone") == []
        assert reader.execute("SELECT count(*) FROM runs_p202501").fetchone() == (3 * 31,)
    assert RetentionSweeper(db).drop_months(LATER).dropped == ["p202501", "p202503"]
    assert tables(db, "standalone") == []


def test_a_month_with_a_run_awaiting_an_outcome_is_never_detached(db: Database) -> None:
    wfs = ledger(db)
    month = january(db)
    stuck = create_tick(db, wfs[0], YEAR_START + 10 * DAY + timedelta(hours=1), YEAR_START)  # never finishes
    with db.transaction() as store:  # decided before the run appeared: the detach checks again
        store.retention.lock_ledger()
        assert not store.retention.detach_month(month)
    assert "runs_p202501" in tables(db, "partition")
    assert rows(db, "SELECT status FROM runs WHERE id = %s", stuck.id) == [("queued",)]


def test_a_detached_month_takes_its_attempts_queue_rows_with_it(db: Database) -> None:
    # A queued attempt whose run no longer counts as open (closed by hand here) is the one
    # way a month could be detached with a queue row: a detach fires no trigger, and a row
    # left without its attempt would head every lease's and idle poll's queue.
    wfs = ledger(db)
    month = january(db)
    orphan = create_tick(db, wfs[0], YEAR_START + 10 * DAY + timedelta(hours=1), YEAR_START)
    later = create_tick(db, wfs[1], LATER, LATER)
    with db.transaction() as store:
        store.conn.execute("UPDATE runs SET status = 'failed', finished_at = scheduled_for WHERE id = %s", (orphan.id,))
    assert [r[0] for r in rows(db, "SELECT run_id FROM attempt_queue ORDER BY queued_at")] == [orphan.id, later.id]
    detach_only(db, month)
    assert rows(db, "SELECT run_id FROM attempt_queue") == [(later.id,)]
