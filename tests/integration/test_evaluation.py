"""The evaluator and the alert lifecycle, driven through the real poller on a virtual clock."""

from datetime import timedelta

import pytest

from tests.helpers import streak
from tests.integration.pipeline import DAILY, FIVE_MIN, OK, alerts_of, drive, events_of, fail, manual_run, tick, workflow
from tickwarden import alerts
from tickwarden.poller import OutcomePoller
from tickwarden.store.monitoring import MonitoringRepository
from tickwarden.store.outbox import OutboxRepository


@pytest.fixture
def poller(db):
    return OutcomePoller(db, "p1")


def outbox(db):
    with db.connection() as conn:
        return conn.execute(
            "SELECT e.kind, c.name, c.audience FROM notification_outbox o"
            " JOIN alert_events e ON e.id = o.event_id JOIN notification_channels c ON c.id = o.channel_id"
            " ORDER BY o.id").fetchall()


def add_channels(db, clock, tenant="acme"):
    with db.connection() as conn:
        tid = conn.execute("SELECT id FROM tenants WHERE name = %s", (tenant,)).fetchone()[0]
        for tenant_id, name, audience in ((tid, tenant, "customer"), (None, "platform", "engineering"),
                                          (tid, f"{tenant}-shadow", "shadow")):
            conn.execute("INSERT INTO notification_channels (tenant_id, name, kind, audience, created_at)"
                         " VALUES (%s, %s, 'recording', %s, %s)", (tenant_id, name, audience, clock.now()))


def test_the_seed_table_counts_three_consecutive_failures(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check", policy={"alert_after": 100})
    base = clock.now().replace(minute=0)
    # oldest first: S F S F F F  →  newest first F F F S F S
    for i, outcome in enumerate([OK, fail(), OK, fail(), fail(), fail()]):
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [outcome], clock)
    with db.transaction() as store:
        assert streak(store, wf.id) == 3
        (inp,) = store.monitoring.evaluation_inputs([wf.id])
    assert inp.failures == 3 and inp.success_run_id is not None


def test_a_five_minute_workflow_opens_a_warning_only_at_the_third_confirmed_failure(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    base = clock.now()
    for i in range(2):
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [fail()], clock)
        assert alerts_of(db, wf) == []
    tick(db, poller, wf, base + timedelta(minutes=15), [fail()], clock)
    (alert,) = alerts_of(db, wf)
    assert (alert.status, alert.first_severity, alert.severity, alert.failure_count) == ("open", "warning", "warning", 3)
    assert alert.owner == "customer" and alert.cadence_seconds == FIVE_MIN
    assert alert.escalate_at == alert.opened_at + timedelta(seconds=6 * FIVE_MIN)


def test_a_daily_workflow_opens_critical_at_the_first_confirmed_failure_after_its_retries(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY)
    run = tick(db, poller, wf, clock.now().replace(hour=2, minute=0) + timedelta(days=1),
               [fail("connection", "connection reset by peer")] * 4, clock)
    assert run.status == "failed" and run.attempts_count == 4
    (alert,) = alerts_of(db, wf)
    assert (alert.first_severity, alert.severity, alert.failure_count, alert.owner) == ("critical", "critical", 1, "engineering")
    assert alert.last_error == "connection reset by peer" and alert.last_run_id == run.id


def test_an_alert_is_not_opened_while_retries_remain(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY)
    run = tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail("connection")] * 2, clock)
    assert run.status == "queued" and run.attempts_count == 3
    assert alerts_of(db, wf) == []


def test_a_retry_that_recovers_produces_no_alert(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY)
    run = tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail("connection"), OK], clock)
    assert run.status == "succeeded" and run.recovered and run.attempts_count == 2
    assert alerts_of(db, wf) == []


def test_non_retryable_categories_skip_retries(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY)
    run = tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail("config", "no such secret")], clock)
    assert run.status == "failed" and run.attempts_count == 1
    (alert,) = alerts_of(db, wf)
    assert alert.owner == "customer"


def test_a_non_retryable_run_written_pending_retry_is_failed_instead_of_retried(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY)
    # a worker that wrongly flags an auth error as retryable: the engine still gives the verdict
    run = tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail("auth", "permission denied", retryable=True)], clock)
    assert run.status == "failed" and run.attempts_count == 1
    assert len(alerts_of(db, wf)) == 1


def test_one_open_alert_per_workflow_with_the_count_updated(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check", policy={"escalate_after": 50})
    base = clock.now()
    for i in range(7):
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [fail()], clock)
    (alert,) = alerts_of(db, wf)
    assert alert.failure_count == 7 and alert.status == "open"
    kinds = [e.kind for e in events_of(db, alert.id)]
    assert kinds == ["opened", "failed", "failed", "failed", "failed"]


def test_a_batch_that_only_counts_failures_up_fans_nothing_out(db, clock, poller, monkeypatch):
    """A recorded failure's event is history only: the fan-out statement is not run for it,
    and the event is still written and reported."""
    wf = workflow(db, clock.now(), cadence=DAILY, policy={"escalate_after": 50})
    add_channels(db, clock)
    base = clock.now()
    tick(db, poller, wf, base + timedelta(minutes=5), [fail()] * 4, clock)
    assert [kind for kind, _, _ in outbox(db)] == ["opened", "opened"]
    assert poller.last.evaluation.notified == 2  # what wakes a notifier: the rows, not the events
    fanned: list[list[int]] = []  # the event ids of each fan-out statement (an empty list runs none)
    real = OutboxRepository.enqueue_notifications
    monkeypatch.setattr(OutboxRepository, "enqueue_notifications",
                        lambda self, ids, now: (fanned.append(list(ids)) if ids else None) or real(self, ids, now))
    tick(db, poller, wf, base + timedelta(days=1, minutes=5), [fail()] * 4, clock)
    (alert,) = alerts_of(db, wf)
    assert alert.failure_count == 2
    assert [e.kind for e in events_of(db, alert.id)] == ["opened", "failed"]
    assert poller.last.evaluation.updated == [alert.id] and len(poller.last.evaluation.event_ids) == 1
    assert fanned == [] and poller.last.evaluation.notified == 0
    assert [kind for kind, _, _ in outbox(db)] == ["opened", "opened"]


def test_a_manual_success_resolves_with_downtime(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY)
    failed = tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail()] * 4, clock)
    clock.advance(7 * 3600)
    run = manual_run(db, wf, clock.now())
    drive(db, poller, run, [OK], clock)
    (alert,) = alerts_of(db, wf)
    assert alert.status == "resolved" and alert.resolved_by_run_id == run.id
    assert alert.first_failure_at == failed.finished_at
    assert alert.downtime_seconds == int((alert.resolved_at - failed.finished_at).total_seconds()) > 7 * 3600
    assert [e.kind for e in events_of(db, alert.id)] == ["opened", "resolved"]


def test_a_manual_failure_does_not_open_a_second_alert(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY)
    tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail()] * 4, clock)
    drive(db, poller, manual_run(db, wf, clock.advance(600)), [fail()], clock)
    (alert,) = alerts_of(db, wf)
    assert alert.failure_count == 2 and alert.status == "open"


def test_after_resolution_a_new_failure_opens_a_new_alert(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY)
    day = clock.now().replace(hour=2, minute=0) + timedelta(days=1)
    tick(db, poller, wf, day, [fail()] * 4, clock)
    tick(db, poller, wf, day + timedelta(days=1), [OK], clock)
    tick(db, poller, wf, day + timedelta(days=2), [fail()] * 4, clock)
    states = sorted((a.status, a.failure_count) for a in alerts_of(db, wf))
    assert states == [("open", 1), ("resolved", 1)]


def test_owner_follows_the_latest_category_until_reassigned_by_hand(db, clock, poller):
    from tickwarden import alerts

    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check", policy={"escalate_after": 50})
    base = clock.now()
    for i in range(3):
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [fail("step_error")], clock)
    (alert,) = alerts_of(db, wf)
    assert alert.owner == "customer"
    tick(db, poller, wf, base + timedelta(minutes=20), [fail("connection")], clock)
    assert alerts_of(db, wf)[0].owner == "engineering"
    alerts.reassign(db, alert.id, "customer", "their warehouse credentials expired", "ana", clock.now())
    tick(db, poller, wf, base + timedelta(minutes=25), [fail("environment")], clock)
    note = alerts.add_note(db, alert.id, "rotating the key, token=abc123", "ana", clock.now())
    (alert,) = alerts_of(db, wf)
    assert alert.owner == "customer" and alert.failure_count == 5
    history = [(e.kind, e.owner, e.actor) for e in events_of(db, alert.id)]
    assert history == [("opened", "customer", "tickwarden"), ("failed", "engineering", "tickwarden"),
                       ("reassigned", "customer", "ana"), ("failed", "customer", "tickwarden"),
                       ("noted", "customer", "ana")]
    handoff = events_of(db, alert.id)[2]
    assert handoff.data == {"from": "engineering", "to": "customer"}
    assert "abc123" not in note.note


def test_reassign_rejects_a_bad_owner_a_missing_and_a_resolved_alert(db, clock, poller):
    from tickwarden import alerts
    from tickwarden.errors import Conflict, InvalidInput, NotFound

    wf = workflow(db, clock.now(), cadence=DAILY)
    tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail()] * 4, clock)
    (alert,) = alerts_of(db, wf)
    with pytest.raises(InvalidInput):
        alerts.reassign(db, alert.id, "nobody", None, "ana", clock.now())
    with pytest.raises(NotFound):
        alerts.reassign(db, alert.id + 99, "customer", None, "ana", clock.now())
    drive(db, poller, manual_run(db, wf, clock.advance(60)), [OK], clock)
    with pytest.raises(Conflict):
        alerts.reassign(db, alert.id, "customer", None, "ana", clock.now())


def test_monitoring_disabled_workflows_are_not_evaluated(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY, monitoring=False)
    run = tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail()] * 4, clock)
    assert run.status == "failed" and alerts_of(db, wf) == []


def test_notifications_go_to_customer_and_engineering_and_shadow_alerts_only_to_shadow(db, clock, poller):
    loud = workflow(db, clock.now(), cadence=DAILY, name="loud")
    quiet = workflow(db, clock.now(), cadence=DAILY, name="quiet", shadow=True)
    add_channels(db, clock)
    tick(db, poller, loud, clock.now() + timedelta(minutes=5), [fail()] * 4, clock)
    assert sorted((k, a) for k, _, a in outbox(db)) == [("opened", "customer"), ("opened", "engineering")]
    tick(db, poller, quiet, clock.now() + timedelta(minutes=5), [fail()] * 4, clock)
    (alert,) = alerts_of(db, quiet)
    assert alert.shadow
    assert [(k, a) for k, _, a in outbox(db)][2:] == [("opened", "shadow")]


def test_a_shadow_tenant_makes_every_alert_shadow(db, clock, poller):
    wf = workflow(db, clock.now(), cadence=DAILY, tenant="beta", tenant_shadow=True)
    add_channels(db, clock, "beta")
    tick(db, poller, wf, clock.now() + timedelta(minutes=5), [fail()] * 4, clock)
    assert alerts_of(db, wf)[0].shadow
    assert [a for _, _, a in outbox(db)] == ["shadow"]


def test_the_poller_takes_outcomes_off_its_queue_at_claim_so_a_fault_is_not_reprocessed(db, clock, poller, caplog):
    good = workflow(db, clock.now(), cadence=DAILY, name="good")
    bad = workflow(db, clock.now(), cadence=DAILY, name="bad")
    with db.connection() as conn:  # a policy that no longer validates (written around the API)
        conn.execute("UPDATE workflows SET policy_overrides = '{\"retries\": \"lots\"}' WHERE id = %s", (bad.id,))
    from tests.integration.pipeline import attempt_once, create_tick

    runs = [create_tick(db, wf, clock.now(), clock.now()) for wf in (good, bad)]
    for run in runs:
        with db.connection() as conn:
            conn.execute("UPDATE runs SET retry_budget = 0 WHERE id = %s", (run.id,))
        attempt_once(db, run, fail(), clock.advance(10))
    poller.run_once(clock.advance(5))
    assert poller.last.claimed == 2
    assert poller.last.evaluation.failed_workflows == [bad.id]
    assert len(alerts_of(db, good)) == 1 and alerts_of(db, bad) == []
    assert any("evaluation of workflow" in r.getMessage() for r in caplog.records)
    poller.run_once(clock.advance(30))
    assert poller.last.claimed == 0
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM outcome_queue").fetchone()[0] == 0


def test_a_full_batch_asks_for_the_next_pass_at_once(db, clock):
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check")
    from tests.integration.pipeline import attempt_once, create_tick

    small = OutcomePoller(db, "p1", batch_size=2)
    base = clock.now()
    for i in range(3):
        attempt_once(db, create_tick(db, wf, base + timedelta(minutes=5 * i), clock.now()), fail(), clock.advance(1))
    now = clock.advance(1)
    assert small.run_once(now) == now  # more is waiting: a decision does not sleep behind a backlog
    assert small.run_once(now) == now + timedelta(seconds=30)
    (alert,) = alerts_of(db, wf)
    assert alert.failure_count == 3


def test_a_database_fault_in_evaluation_keeps_the_claim_and_the_next_outcome_is_evaluated_afresh(db, schema, clock):
    from tests.dbutil import TEST_URL
    from tests.integration.pipeline import attempt_once, create_tick
    from tickwarden.db import Database

    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="check", policy={"alert_after": 2})
    single = Database(TEST_URL, schema=schema, min_size=1, max_size=1)
    try:
        with single.connection() as conn:  # the poller's only connection gives up on a lock quickly
            conn.execute("SET lock_timeout = '200ms'")
        poller = OutcomePoller(single, "p1")
        blocker = db.connect(autocommit=True)  # someone holds the workflow's evaluation lock
        blocker.execute("SELECT pg_advisory_lock(7301, %s)", (wf.id,))
        base = clock.now()
        for i in range(2):
            attempt_once(db, create_tick(db, wf, base + timedelta(minutes=5 * i), clock.now()), fail(), clock.advance(1))
        poller.run_once(clock.advance(5))
        assert poller.last.claimed == 2 and poller.last.evaluation.failed_workflows == [wf.id]
        assert alerts_of(db, wf) == []
        blocker.close()
        poller.run_once(clock.advance(30))
        assert poller.last.claimed == 0  # nothing is reprocessed
        attempt_once(db, create_tick(db, wf, base + timedelta(minutes=10), clock.now()), fail(), clock.advance(1))
        poller.run_once(clock.advance(5))
        (alert,) = alerts_of(db, wf)
        assert alert.failure_count == 3  # recounted from history, the earlier failures included
    finally:
        single.close()


def test_the_failure_rate_is_counted_with_the_inputs_once_the_profile_is_known(db, clock, poller, monkeypatch):
    """The first evaluation of a profile with a rate rule counts the rate with a statement of its
    own; from then on the evaluation's inputs count it, in the same statement, and decide alike."""
    monkeypatch.setattr(alerts, "_rate_profiles", ())
    counted: list[dict[int, int]] = []  # the windows of each statement of its own
    real = MonitoringRepository.failure_rates
    monkeypatch.setattr(MonitoringRepository, "failure_rates",
                        lambda self, windows, now=None: (counted.append(dict(windows)) if windows else None)
                        or real(self, windows, now))
    wf = workflow(db, clock.now(), cadence=FIVE_MIN, name="flaky",
                  policy={"alert_after": 5, "rate_window": 4, "rate_threshold": 0.5})
    base = clock.now()
    for i, outcome in enumerate([fail(), OK, fail(), OK]):
        tick(db, poller, wf, base + timedelta(minutes=5 * (i + 1)), [outcome], clock)
    assert alerts_of(db, wf) == []  # three ticks, then a window of four with two failures: not yet a rate
    assert counted == [{wf.id: 4}]  # the first failure's evaluation only
    tick(db, poller, wf, base + timedelta(minutes=25), [fail()], clock)
    (alert,) = alerts_of(db, wf)
    assert alert.reason == "failure_rate" and alert.failure_count == 1
    assert counted == [{wf.id: 4}]
