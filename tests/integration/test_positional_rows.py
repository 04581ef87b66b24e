"""Statements whose rows are read by position (as tuples, not dicts) return their dataclass's fields in
its order: a column added to a table, to a statement or to a dataclass fails here instead of shifting
a field, and the instances built are those the same rows read by name build."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta

from tests.execution_helpers import make_runnable, python_step, queue_run
from tickwarden.models import Attempt
from tickwarden.store.ledger import lease_statements
from tickwarden.store.monitoring import AUDIT_COLUMNS, TickAudit
from tickwarden.store.queries import queries


def _columns(conn, name, params):
    return [column.name for column in conn.execute(queries()[name], params).description]


def test_the_lease_returns_an_attempts_fields_in_order(db, clock):
    with db.transaction() as store:
        (lock, params), (write, _) = lease_statements("w1", clock.now(), 60, 2)
        store.conn.execute(queries()[lock], params)  # tells the writes what it locked (nothing here)
        assert _columns(store.conn, write, params) == [f.name for f in fields(Attempt)]


def test_the_deadline_pass_returns_a_watermarks_fields_in_order_then_the_overdue_run(db, clock):
    with db.transaction() as store:
        columns = _columns(store.conn, "monitoring_lock_overdue_and_arm",
                           {"now": clock.now(), "limit": 10, "lookback_start": clock.now(), "audit_limit": 10})
    assert columns == list(AUDIT_COLUMNS)
    assert AUDIT_COLUMNS[:len(fields(TickAudit))] == tuple(f.name for f in fields(TickAudit))


def test_an_attempt_leased_on_every_path_is_the_attempt_the_ledger_reads(db, clock):
    """The worker's exchange, a lease in autocommit and one in a pipelined transaction (the simulator's)."""
    wf = make_runnable(db, clock.now(), [python_step("noop", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=10 - i), clock.now()) for i in range(4)]
    with db.autocommit() as store:
        leased = store.execution.exchange("w1", clock.now(), 60, lease=1).leased
        leased += store.ledger.lease_attempts_with_ticks("w2", clock.now(), 60, limit=2)
    with db.transaction(pipelined=True) as store:
        leased += store.ledger.lease_attempts_with_ticks("w3", clock.now(), 60, limit=2)
    assert [a.run_id for a, _ in leased] == [r.id for r in runs]
    assert [a.worker_id for a, _ in leased] == ["w1", "w2", "w2", "w3"]
    with db.transaction() as store:
        for attempt, tick in leased:
            assert tick == attempt.run_scheduled_for
            assert [attempt] == store.ledger.list_attempts(attempt.run_id, tick)
