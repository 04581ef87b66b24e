"""Three replicas of each monitoring loop over one ledger: nothing doubled, nothing lost."""

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from tests.helpers import lease
from tests.dbutil import TEST_URL
from tests.integration.pipeline import DAILY, FIVE_MIN, HOURLY, workflow
from tickwarden.cadence import parse_schedule
from tickwarden.db import Database
from tickwarden.deadlines import DeadlineDetector
from tickwarden.alerts import EscalationClock
from tickwarden.alerts import profile_of
from tickwarden.models import AttemptOutcome
from tickwarden.poller import OutcomePoller
from tickwarden.profile import run_deadline
from tickwarden.store import TickRequest

STEPS = 150  # virtual minutes
REPLICAS = 3


def outcome_for(name: str, scheduled_for, number: int, broken: bool) -> AttemptOutcome:
    """A deterministic, varied outcome: broken workflows mostly fail, healthy ones sometimes."""
    digest = hashlib.sha256(f"{name}|{scheduled_for.isoformat()}|{number}".encode()).digest()[0]
    failing = digest < (200 if broken else 60)
    if not failing:
        return AttemptOutcome(status="succeeded")
    category = ("step_error", "connection", "timeout", "config")[digest % 4]
    return AttemptOutcome(status="failed", error_category=category, error=f"{category} failure", failed_step="load",
                          retryable=category != "config")


def test_three_replicas_of_every_loop_double_nothing_and_lose_nothing(db, schema, clock):
    specs = [(f"w{i}", (FIVE_MIN, HOURLY, DAILY)[i % 3], i % 2 == 0) for i in range(18)]
    specs += [("outage", FIVE_MIN, False), ("stuck", FIVE_MIN, False)]
    workflows = {}
    for name, cadence, broken in specs:
        cron = {FIVE_MIN: "*/5 * * * *", HOURLY: "*/20 * * * *", DAILY: "7 * * * *"}[cadence]
        workflows[name] = (workflow(db, clock.now(), name=name, cadence=cadence, cron=cron), cadence, broken, cron)
    with db.connection() as conn:
        tid = conn.execute("SELECT id FROM tenants WHERE name = 'acme'").fetchone()[0]
        for tenant_id, name, audience in ((tid, "acme", "customer"), (None, "platform", "engineering")):
            conn.execute("INSERT INTO notification_channels (tenant_id, name, kind, audience, created_at)"
                         " VALUES (%s, %s, 'recording', %s, %s)", (tenant_id, name, audience, clock.now()))

    replicas = [Database(TEST_URL, schema=schema, min_size=1, max_size=2) for _ in range(REPLICAS * 3)]
    loops = []
    for i in range(REPLICAS):
        loops.append(OutcomePoller(replicas[3 * i], f"p{i}", batch_size=7))
        loops.append(EscalationClock(replicas[3 * i + 1], batch_size=3))
        loops.append(DeadlineDetector(replicas[3 * i + 2], batch_size=4))
    errors: list[BaseException] = []
    pool = ThreadPoolExecutor(max_workers=len(loops))
    stuck_attempts = set()
    try:
        last = clock.now()
        for _ in range(STEPS):
            now = clock.advance(60)
            ticks = []
            for name, (wf, cadence, _, cron) in workflows.items():
                for fire in parse_schedule(cron).fires_between(last, now):
                    if name == "outage" and fire.minute in (15, 20, 25):
                        continue  # the trigger was down: no run at all
                    retries = profile_of(cadence, {}).retries
                    deadline = run_deadline(fire, timeout_seconds=120, backoffs=(0,) * retries, interval_seconds=cadence)
                    ticks.append(TickRequest(wf.tenant_id, wf.id, fire, retries, deadline))
            last = now
            with db.transaction() as store:
                store.ledger.create_tick_runs(ticks, now)
                leased = lease(store, "worker", now, 3600, limit=1000)
                names = {wf.id: n for n, (wf, _, _, _) in workflows.items()}
                for attempt in leased:
                    name = names[attempt.workflow_id]
                    if name == "stuck":
                        stuck_attempts.add(attempt.id)  # the worker hangs on a live lease: its deadline passes
                        continue
                    run = store.ledger.get_run(attempt.run_id)
                    store.ledger.finish_attempt(attempt, "worker", outcome_for(name, run.scheduled_for, attempt.number,
                                                                       workflows[name][2]), now)
            barrier = threading.Barrier(len(loops))

            def one(loop, now=now, barrier=barrier):
                try:
                    barrier.wait(timeout=30)
                    loop.run_once(now)
                    loop.run_once(now)
                except BaseException as exc:  # surfaced below
                    errors.append(exc)

            list(pool.map(one, loops))
            assert not errors, errors
        # drain: whatever the last concurrent passes left
        final = clock.advance(3600)
        for loop in loops:
            loop.run_once(final)
    finally:
        pool.shutdown()
        for replica in replicas:
            replica.close()

    with db.connection() as conn:
        q = lambda sql, *a: conn.execute(sql, a).fetchall()  # noqa: E731
        # every finished attempt was claimed, and no run is left pending a retry
        assert q("SELECT count(*) FROM outcome_queue") == [(0,)]
        assert q("SELECT count(*) FROM runs WHERE status = 'pending_retry'") == [(0,)]
        # one attempt per retry: attempts numbered 1..n without gaps, n = attempts_count, within the budget
        assert q("""SELECT count(*) FROM runs r WHERE attempts_count <> (SELECT count(*) FROM attempts a WHERE a.run_id = r.id)
                     OR attempts_count > retry_budget + 1
                     OR (SELECT max(number) FROM attempts a WHERE a.run_id = r.id) <> attempts_count""") == [(0,)]
        # a failed run used its whole budget unless its last error was not retryable
        assert q("""SELECT count(*) FROM runs WHERE status = 'failed' AND attempts_count < retry_budget + 1
                     AND error_category NOT IN ('config', 'auth')""") == [(0,)]
        # the outage's ticks and the stuck runs were recorded missed, each once
        assert q("""SELECT count(*) FROM runs r JOIN workflows w ON w.id = r.workflow_id
                     WHERE w.name = 'outage' AND r.status = 'missed'""")[0][0] >= 6
        assert q("""SELECT count(*) FROM runs r JOIN workflows w ON w.id = r.workflow_id
                     WHERE w.name = 'stuck' AND r.status = 'missed'""")[0][0] >= 10
        # events: one opened per alert, at most one escalated and resolved, no failure recorded twice
        assert q("""SELECT count(*) FROM alerts a WHERE
                     (SELECT count(*) FROM alert_events e WHERE e.alert_id = a.id AND e.kind = 'opened') <> 1
                  OR (SELECT count(*) FROM alert_events e WHERE e.alert_id = a.id AND e.kind = 'escalated') > 1
                  OR (SELECT count(*) FROM alert_events e WHERE e.alert_id = a.id AND e.kind = 'resolved')
                     <> (a.status = 'resolved')::int
                  OR ((SELECT count(*) FROM alert_events e WHERE e.alert_id = a.id AND e.kind = 'escalated') = 1)
                     <> (a.severity <> a.first_severity)""") == [(0,)]
        assert q("""SELECT count(*) FROM (SELECT alert_id, data->>'failure_count' FROM alert_events
                     WHERE kind = 'failed' GROUP BY 1, 2 HAVING count(*) > 1) d""") == [(0,)]
        # outbox: exactly one row per notifying event and channel
        assert q("""SELECT count(*) FROM alert_events WHERE kind IN ('opened', 'escalated', 'resolved')""")[0][0] * 2 == \
            q("SELECT count(*) FROM notification_outbox")[0][0]
        total_alerts = q("SELECT count(*) FROM alerts")[0][0]
        assert total_alerts >= 5

    # nothing lost: each workflow's alert state matches a recount of its history
    with db.transaction() as store:
        inputs = store.monitoring.evaluation_inputs([wf.id for wf, _, _, _ in workflows.values()])
    for inp in inputs:
        profile = profile_of(inp.cadence_seconds, {})
        if inp.failures >= profile.alert_after:
            assert inp.alert_id is not None and inp.alert_failure_count == inp.failures, inp
        elif inp.failures == 0:
            assert inp.alert_id is None, inp
    assert stuck_attempts
    assert timedelta(0) <= clock.now() - final
