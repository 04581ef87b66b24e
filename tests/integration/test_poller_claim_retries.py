"""The poller's claim launches the retries of the runs it claims, in its own statement.

A pass whose claim finds only failures with retries left (most passes with work) then waits
for the server once, instead of once for the claim and once more for the launch. The claim
launches only the retries of runs whose tick lies in the month of the pass's `now` or the one
before (its writes' plan holds those months' partitions alone), of a category that may be
retried; the pass launches any other as before. Either way each retry is launched once, also
when another replica's retry engine races the claim.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from tests.dbutil import TEST_URL
from tests.integration.pipeline import FIVE_MIN, OK, attempt_once, fail, workflow
from tests.integration.test_poller_pipeline import round_trips, traced_pool
from tickwarden.categories import NOT_RETRYABLE
from tickwarden.db import Database
from tickwarden.poller import OutcomePoller
from tickwarden.retries import PATIENT_LIST
from tickwarden.store import TickRequest, monitoring
from tickwarden.store.ledger import month_bounds
from tickwarden.store.monitoring import claim_text
from tickwarden.store.queries import queries


def failed_with_retries(db, clock, count: int = 1, category: str = "connection"):
    """`count` runs (a minute's backoff before each retry) whose first attempt failed with
    retries left (pending_retry), a second apart, waiting for the poller."""
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, policy={"alert_after": 100, "retries": 2})
    runs = []
    for n in range(count):
        tick = clock.now() - timedelta(minutes=5 * n)
        with db.transaction() as store:
            run = store.ledger.create_tick_run(
                TickRequest(wf.tenant_id, wf.id, tick, 2, tick + timedelta(hours=1), (60, 60)), clock.now())
        assert run is not None
        runs.append(run)
    for run in runs:
        attempt_once(db, run, fail(category), clock.advance(1))
    return wf, runs


def attempts_of(db, run) -> list[tuple[int, str]]:
    with db.connection() as conn:
        return conn.execute("SELECT number, status FROM attempts WHERE run_id = %s ORDER BY number",
                            (run.id,)).fetchall()


def test_a_pass_over_a_failure_with_retries_left_waits_for_the_server_once_before_its_commit(db, clock, tmp_path):
    """Claim and retry launch in one statement: one flush, then the commit (its sync and the
    flush that reads it). Before, the launch was read in a flush of its own: four waits."""
    wf, (run,) = failed_with_retries(db, clock)
    path = tmp_path / "trace"
    with traced_pool(db, path) as traced:
        poller = OutcomePoller(traced, "p1")
        poller._busy = True  # the pass after a busy one: no look before the claim
        result = poller.poll(clock.advance(5))
    assert result.claimed == 1 and result.retried == [run.id] and result.evaluation.evaluated == 0
    assert result.retry_due == [clock.now() - timedelta(seconds=5) + timedelta(seconds=60)]  # `connection`: backoff
    assert round_trips(path) == ["Flush", "Sync", "Flush"], round_trips(path)
    assert attempts_of(db, run) == [(1, "failed"), (2, "queued")]


def test_a_retry_the_claim_leaves_is_launched_by_the_pass_with_the_same_outcome(db, clock, monkeypatch):
    """A run whose tick lies outside the claim's months gets the same attempt, not before the
    same time (its backoff after its failure), from the pass's own launch (`ledger_queue_retries`),
    as one inside them."""
    wf, (outside, inside) = failed_with_retries(db, clock, count=2)  # failed 1 s apart, `outside` first
    poller = OutcomePoller(db, "p1", batch_size=1)
    real = monitoring.launch_months
    monkeypatch.setattr(monitoring, "launch_months", lambda now: ((2000, 1), (2000, 1)))
    first = poller.poll(clock.advance(5))
    monkeypatch.setattr(monitoring, "launch_months", real)
    second = poller.poll(clock.advance(5))
    assert first.retried == [outside.id] and second.retried == [inside.id]
    assert second.retry_due[0] - first.retry_due[0] == timedelta(seconds=1)  # each its backoff after its failure
    assert attempts_of(db, inside) == attempts_of(db, outside) == [(1, "failed"), (2, "queued")]


def test_a_run_pending_a_retry_of_a_category_never_retried_gets_its_verdict_not_a_retry(db, clock):
    """The claim launches no retry for an unretryable category (whoever wrote the run pending):
    the pass fails the run and evaluates its workflow, as before."""
    wf, (run,) = failed_with_retries(db, clock)
    with db.connection() as conn:
        conn.execute("UPDATE runs SET error_category = 'config' WHERE id = %s", (run.id,))
        conn.commit()
    result = OutcomePoller(db, "p1").poll(clock.advance(5))
    assert result.retried == [] and result.evaluation.evaluated == 1
    with db.transaction() as store:
        assert store.ledger.get_run(run.id).status == "failed"
    assert attempts_of(db, run) == [(1, "failed")]


def test_two_replicas_claiming_at_once_launch_each_retry_once(db, schema, clock):
    """Two pollers claim at once from a backlog of failures with retries left: their claims are
    disjoint (SKIP LOCKED), and each run gets exactly one next attempt."""
    wf, runs = failed_with_retries(db, clock, count=12)
    now = clock.advance(5)
    barrier = threading.Barrier(2)
    results: dict[str, list] = {}

    def claim(name: str) -> None:
        with Database(TEST_URL, schema=schema, min_size=1, max_size=1) as replica:
            with replica.transaction() as store:
                barrier.wait()
                claimed = store.monitoring.claim_finished_attempts(
                    now, 5, not_retryable=sorted(NOT_RETRYABLE), patient=PATIENT_LIST)
                barrier.wait()  # both claims done before either commits
            results[name] = claimed

    threads = [threading.Thread(target=claim, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = ([c.run_id for c in results[n] if c.retry_attempt_id is not None] for n in ("a", "b"))
    assert len(a) == len(b) == 5 and not set(a) & set(b)
    rest = OutcomePoller(db, "p3").poll(now)
    assert sorted(a + b + rest.retried) == sorted(r.id for r in runs)
    for run in runs:
        assert attempts_of(db, run) == [(1, "failed"), (2, "queued")]


def test_a_retry_engine_racing_the_claims_launch_finds_it_done(db, schema, clock):
    """Another replica's launch (`ledger_queue_retries`) of the run the claim launches waits for
    the claim's transaction, then finds the run queued (compare-and-set): one attempt."""
    wf, (run,) = failed_with_retries(db, clock)
    now = clock.advance(5)
    with db.transaction() as store:
        claimed = store.monitoring.claim_finished_attempts(now, 5, not_retryable=sorted(NOT_RETRYABLE),
                                                           patient=PATIENT_LIST)
        assert [c.retry_attempt_id is not None for c in claimed] == [True]
        other: list = []
        racer = threading.Thread(target=lambda: other.append(_queue_retry(schema, run, now)))
        racer.start()
        racer.join(timeout=1)
        assert racer.is_alive()  # waits on the run's row lock
    racer.join()
    assert other == [[]]
    assert attempts_of(db, run) == [(1, "failed"), (2, "queued")]


def _queue_retry(schema: str, run, now):
    with Database(TEST_URL, schema=schema, min_size=1, max_size=1) as replica:
        with replica.transaction() as store:
            return store.ledger.queue_retries([(run.id, run.scheduled_for)], now, PATIENT_LIST)


def test_the_claims_months_are_nows_and_the_one_before_in_the_first_week_of_a_month():
    """The months the claim launches retries in (`launch_months`), in UTC whatever `now`'s zone:
    the one before `now`'s as well for the first seven days of a month (across a new year too)."""
    from datetime import UTC, datetime, timezone

    from tickwarden.store.monitoring import launch_months

    assert launch_months(datetime(2026, 1, 1, tzinfo=UTC)) == ((2025, 12), (2026, 1))
    assert launch_months(datetime(2026, 3, 7, 23, 59, 59, tzinfo=UTC)) == ((2026, 2), (2026, 3))
    assert launch_months(datetime(2026, 3, 8, tzinfo=UTC)) == ((2026, 3), (2026, 3))
    assert launch_months(datetime(2026, 3, 8, 1, 30, tzinfo=timezone(timedelta(hours=2)))) == (
        (2026, 2), (2026, 3))  # 23:30 on the 7th in UTC
    assert launch_months(datetime(2026, 3, 31, 23, 30, tzinfo=timezone(timedelta(hours=-2)))) == (
        (2026, 3), (2026, 4))  # 01:30 on April 1st in UTC


def test_past_a_months_first_week_the_claims_launch_writes_that_months_partitions_alone(db):
    """Mid-month the launch's writes hold the month of `now` alone (one partition of runs to
    update, one of attempts to read, where the first week's hold two): the claim sets up and
    tears down no partition of the month before, launching or not."""
    from datetime import UTC, datetime

    from tests.integration.test_ledger_partitions import generic_plan
    from tickwarden.retention import RetentionSweeper
    from tickwarden.store.monitoring import launch_months

    def written(node: dict, inside: bool = False) -> set[str]:
        """The ledger partitions the plan's `moved` and `launched` (the launch's writes) name."""
        inside = inside or node.get("Subplan Name") in ("CTE moved", "CTE launched")
        name = node.get("Relation Name", "")
        found = {name} if inside and name.startswith(("runs_", "attempts_")) else set()
        for target in node.get("Target Tables", []) if inside else ():
            found.add(target["Relation Name"])
        for child in node.get("Plans", []):
            found |= written(child, inside)
        return found

    RetentionSweeper(db).create_months(datetime(2026, 1, 1, tzinfo=UTC))
    params = {"now": None, "after_at": None, "after_id": None, "launch": True,
              "not_retryable": sorted(NOT_RETRYABLE), "patient": list(PATIENT_LIST)}
    planned = {}
    for day in (7, 8):
        now = datetime(2026, 3, day, 12, tzinfo=UTC)
        with db.transaction() as store:
            store.conn.execute("SET LOCAL tickwarden.platform = 'on'")
            planned[day] = written(generic_plan(store.conn, claim_text(500, launch_months(now)),
                                                {**params, "now": now})[0]["Plan"])
    assert planned[7] == {"runs_p202602", "runs_p202603", "attempts_p202602", "attempts_p202603"}, planned[7]
    assert planned[8] == {"runs_p202603", "attempts_p202603"}, planned[8]


class Looked(Exception):
    """Ends a transaction that only looked: it rolls back."""


def test_mid_month_a_retry_of_the_month_befores_tick_is_launched_by_the_pass(db, clock):
    """Past a month's first week the claim leaves a run of the month before pending a retry to
    the pass's retry engine, which launches it as the claim would: the next attempt, due after
    its backoff, once."""
    assert clock.now().day > 7
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, policy={"alert_after": 100, "retries": 2})
    tick = clock.now().replace(day=1, hour=0, minute=0) - timedelta(minutes=5)  # the month before
    with db.transaction() as store:
        run = store.ledger.create_tick_run(
            TickRequest(wf.tenant_id, wf.id, tick, 2, clock.now() + timedelta(hours=1), (60, 60)), clock.now())
    assert run is not None
    failed_at = clock.advance(1)
    attempt_once(db, run, fail("connection"), failed_at)
    with pytest.raises(Looked), db.transaction() as store:  # rolled back: the pass claims it after
        claimed = store.monitoring.claim_finished_attempts(clock.advance(5), 5, not_retryable=sorted(NOT_RETRYABLE),
                                                           patient=PATIENT_LIST)
        assert [(c.run_status, c.retry_sent) for c in claimed] == [("pending_retry", False)]
        raise Looked
    result = OutcomePoller(db, "p1").poll(clock.now())
    assert result.retried == [run.id] and result.retry_due == [failed_at + timedelta(seconds=60)]
    assert attempts_of(db, run) == [(1, "failed"), (2, "queued")]


def test_the_claims_retry_launch_is_the_retry_engines_own_writes():
    """One owner of a retry's launch: the claim's CTEs are `ledger_queue_retries`' text, its runs the claim's."""
    engine = queries()["ledger_queue_retries"].removesuffix(";")
    claim = claim_text(10, ((2026, 2), (2026, 3)))
    assert "{retry_launch}" not in claim and "{months}" not in claim
    moved, insert = engine.removeprefix("WITH ").split("\n)\nINSERT INTO attempts ")
    given = {"ANY(%(run_ids)b::bigint[])": "ANY (ARRAY(SELECT run_id FROM looked WHERE retry_sent))",
             "ANY(%(run_scheduled_fors)b::timestamptz[])":
                 "ANY (ARRAY(SELECT run_scheduled_for FROM looked WHERE retry_sent))"}
    for bound, taken in given.items():
        moved = moved.replace(bound, taken)
    bounds = month_bounds((2026, 2), (2026, 3))
    assert moved.replace("{months}", bounds) in claim
    assert ("), launched AS (\nINSERT INTO attempts " + insert.replace("{months}", bounds) + "\n)") in claim


def test_the_claim_names_the_tick_of_a_run_pending_a_retry_alone(db, clock):
    """The claim returns a run's tick only where the pass may write the run (a retry to launch,
    by the claim or by the pass): a success's and a confirmed failure's tick are None, unread."""
    wf, (pending,) = failed_with_retries(db, clock)
    other = workflow(db, clock.now(), name="other", cadence=FIVE_MIN, policy={"alert_after": 100, "retries": 0})
    ticks = [clock.now() - timedelta(minutes=5 * n) for n in (1, 2)]
    runs = []
    for tick, outcome in zip(ticks, (OK, fail()), strict=True):
        with db.transaction() as store:
            run = store.ledger.create_tick_run(
                TickRequest(other.tenant_id, other.id, tick, 0, tick + timedelta(hours=1)), clock.now())
        assert run is not None
        attempt_once(db, run, outcome, clock.advance(1))
        runs.append(run)
    with db.transaction() as store:
        claimed = store.monitoring.claim_finished_attempts(clock.advance(5), 5, not_retryable=sorted(NOT_RETRYABLE),
                                                           patient=PATIENT_LIST)
    ticks_of = {c.run_id: (c.run_status, c.run_scheduled_for) for c in claimed}
    assert ticks_of == {pending.id: ("pending_retry", pending.scheduled_for),
                        runs[0].id: ("succeeded", None), runs[1].id: ("failed", None)}
