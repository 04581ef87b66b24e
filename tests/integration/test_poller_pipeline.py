"""The poller's pass with work, in round trips: its statements travel together where none waits on another."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.pq import Trace

from tests.dbutil import TEST_URL
from tests.integration.pipeline import FIVE_MIN, alerts_of, attempt_once, create_tick, fail, workflow
from tickwarden import alerts
from tickwarden.alerts import profile_of
from tickwarden.db import Database
from tickwarden.poller import OutcomePoller
from tickwarden.store.ledger import LedgerRepository
from tickwarden.store import monitoring
from tickwarden.store.monitoring import MonitoringRepository


def round_trips(path: Path) -> list[str]:
    """The messages after which the client waits for the server: Sync, Flush, a simple Query."""
    return [line.split("\t")[2] for line in path.read_text(errors="replace").splitlines()
            if len(line.split("\t")) >= 3 and line.split("\t")[0] == "F"
            and line.split("\t")[2] in ("Sync", "Flush", "Query")]


@contextlib.contextmanager
def traced_pool(db, path: Path) -> Iterator[Database]:
    """A one-connection pool on `db`'s schema whose protocol messages go to `path`, for `round_trips`.

    The trace is flushed before the pool closes: the messages of its closing are not the test's.
    """
    with path.open("w") as trace_file:
        def configure(conn) -> None:
            conn.pgconn.trace(trace_file.fileno())
            conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)

        with Database(TEST_URL, schema=db.schema, min_size=1, max_size=1, configure=configure) as traced:
            yield traced
            trace_file.flush()


def a_verdict_and_a_retry(db, clock, *, alert_after: int):
    """Two failed attempts waiting for the poller: one unretryable (a verdict for the workflow
    returned, alerting after `alert_after` failures), one with retries left."""
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, policy={"alert_after": alert_after})
    other = workflow(db, clock.now(), cadence=FIVE_MIN, name="other", policy={"alert_after": 100, "retries": 2})
    verdict = create_tick(db, wf, clock.now(), clock.now())
    retried = create_tick(db, other, clock.now(), clock.now())
    attempt_once(db, verdict, fail(retryable=False), clock.advance(60))
    attempt_once(db, retried, fail(), clock.advance(1))
    return wf, verdict, retried


def traced_pass(db, clock, tmp_path, *, alert_after: int, channel: bool = False):
    """A pass (after a busy one: no look) over a verdict and a retry; its result and its waits.

    `channel`: the tenant has a customer channel, so an alert opened is fanned out to it.
    """
    wf, verdict, retried = a_verdict_and_a_retry(db, clock, alert_after=alert_after)
    if channel:
        with db.connection() as conn:
            conn.execute("INSERT INTO notification_channels (tenant_id, name, kind, audience, created_at)"
                         " VALUES (%s, 'acme', 'recording', 'customer', %s)", (wf.tenant_id, clock.now()))
    path = tmp_path / "trace"
    with traced_pool(db, path) as traced:
        poller = OutcomePoller(traced, "p1")
        poller._busy = True  # the pass after a busy one: no look before the claim
        result = poller.poll(clock.advance(5))
    assert result.claimed == 2 and result.retried == [retried.id]
    assert result.evaluation.evaluated == 1
    with db.transaction() as store:
        assert store.ledger.get_run(retried.id).status == "queued"
        assert store.ledger.get_run(verdict.id).status == "failed"
    return round_trips(path)


def test_a_pass_with_a_retry_and_a_verdict_waits_for_the_server_four_times(db, clock, tmp_path, monkeypatch):
    """BEGIN goes with the claim, the retry launch, the savepoint and the evaluation's lock with its
    inputs, and the savepoint's release with the commit."""
    monkeypatch.setattr(alerts, "_rate_profiles", ())  # the verdict's rate profile is met for the first time
    # claim, evaluation inputs (the retry launch with them), failure rate: a flush each; then the
    # commit's sync and the flush that reads its results (one wait). Sent one at a time: nine.
    waits = traced_pass(db, clock, tmp_path, alert_after=100)
    assert waits == ["Flush"] * 3 + ["Sync", "Flush"], waits


def test_once_the_rate_profile_is_known_the_failure_rate_costs_no_wait_of_its_own(db, clock, tmp_path, monkeypatch):
    """The evaluation's inputs count the rate of a profile met before: claim, inputs, commit."""
    stored = '{"alert_after": 100}'  # the verdict workflow's overrides as the database prints them
    profile = profile_of(FIVE_MIN, stored)
    monkeypatch.setattr(alerts, "_rate_profiles",
                        ((FIVE_MIN, stored, profile.rate_window, profile.alert_after),))
    waits = traced_pass(db, clock, tmp_path, alert_after=100)
    assert waits == ["Flush"] * 2 + ["Sync", "Flush"], waits


def test_an_alert_opened_and_fanned_out_with_its_hold_decided_waits_once_for_the_fan_out(
        db, clock, tmp_path, monkeypatch):
    """The fan-out returns each new row's maintenance scope: no look of its own after it."""
    stored = '{"alert_after": 1}'
    profile = profile_of(FIVE_MIN, stored)
    monkeypatch.setattr(alerts, "_rate_profiles", ((FIVE_MIN, stored, profile.rate_window, profile.alert_after),))
    # claim, evaluation inputs, opening, fan-out: a flush each; then the commit.
    waits = traced_pass(db, clock, tmp_path, alert_after=1, channel=True)
    assert waits == ["Flush"] * 4 + ["Sync", "Flush"], waits
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM notification_outbox WHERE status = 'pending'").fetchone()[0] == 1


def test_a_database_error_in_the_batch_evaluation_keeps_the_claim_and_the_retries_and_evaluates_one_by_one(
        db, clock, monkeypatch):
    """The evaluation's savepoint is rolled back inside the pipelined transaction: the claim and
    the retry launch before it commit, and each workflow is then evaluated on its own."""
    wf, verdict, retried = a_verdict_and_a_retry(db, clock, alert_after=1)
    real = MonitoringRepository.evaluation_inputs
    faults: list[int] = []

    def faulty(self, workflow_ids, *args):
        if not faults:  # the batch's statement fails at the server; the one-by-one ones do not
            faults.append(1)
            self.conn.execute("SELECT 1 / 0")
        return real(self, workflow_ids, *args)

    monkeypatch.setattr(MonitoringRepository, "evaluation_inputs", faulty)
    result = OutcomePoller(db, "p1").poll(clock.advance(5))
    assert faults == [1]
    assert result.claimed == 2 and result.retried == [retried.id]
    assert len(result.evaluation.opened) == 1 and result.evaluation.failed_workflows == []
    with db.transaction() as store:
        assert store.ledger.get_run(retried.id).status == "queued"
        assert not store.monitoring.finished_attempts_waiting(clock.now())
    assert [a.workflow_id for a in alerts_of(db, wf)] == [wf.id]


def test_a_database_error_in_the_retry_launch_read_after_the_evaluation_fails_the_whole_pass(db, clock, monkeypatch):
    """The retry launch's result is read after the evaluation, its error all the same: the pass
    raises and rolls back whole (claim, retry, evaluation), and the next pass does it all.
    (The launch the claim leaves to the pass: a run whose tick lies outside the claim's months.)"""
    monkeypatch.setattr(monitoring, "launch_months", lambda now: ((2000, 1), (2000, 1)))
    wf, verdict, retried = a_verdict_and_a_retry(db, clock, alert_after=1)
    real = LedgerRepository.submit_queue_retries
    faults: list[int] = []

    def faulty(self, runs, now, patient=()):
        if not faults:  # the first launch fails at the server; the next pass's does not
            faults.append(1)
            read = self._submit_text("SELECT 1 / 0 AS boom", None)
            return lambda: [read()]
        return real(self, runs, now, patient)

    monkeypatch.setattr(LedgerRepository, "submit_queue_retries", faulty)
    poller = OutcomePoller(db, "p1")
    with pytest.raises(psycopg.Error):
        poller.poll(clock.advance(5))
    with db.transaction() as store:
        assert store.ledger.get_run(retried.id).status == "pending_retry"
        assert store.monitoring.finished_attempts_waiting(clock.now())
    assert alerts_of(db, wf) == []
    result = poller.poll(clock.advance(1))
    assert result.claimed == 2 and result.retried == [retried.id] and len(result.evaluation.opened) == 1
    assert [a.workflow_id for a in alerts_of(db, wf)] == [wf.id]
