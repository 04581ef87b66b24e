"""What every message about an alert says: which tick, when it was due, when its deadline
expired, the last observed attempt, the owner, the failing step's sanitized log tail and a
link to the alert's page; and the resolution, short, without the log. Driven through the
real pipeline (poller, deadline detector, notifier) on a virtual clock."""

from __future__ import annotations

from datetime import timedelta

import httpx

from tests.apiutil import live_server, make_token
from tests.integration.notify_builders import add_channel
from tests.integration.pipeline import DAILY, OK, alerts_of, attempt_once, create_tick, tick, workflow
from tickwarden.clock import isoformat_z
from tickwarden.deadlines import DeadlineDetector
from tickwarden.models import AttemptOutcome
from tickwarden.messages import slack_date
from tickwarden.notifier import Notifier
from tickwarden.poller import OutcomePoller
from tickwarden.transports.recording import RecordingTransport

DASHBOARD = "https://tw.example"
STEP_LOG = "\n".join([
    "load started",
    *[f"batch {i} loaded" for i in range(40)],
    "connecting with password=hunter2-SECRET-9",  # within the tail a message keeps
    "Authorization: Bearer SECRET-bearer-77",
    "customer jane.doe@acme.example rejected",
    "ERROR: duplicate key value violates unique constraint orders_pkey",
])
SECRETS = ("hunter2-SECRET-9", "SECRET-bearer-77", "jane.doe@acme.example")


def failing_outcome() -> AttemptOutcome:
    return AttemptOutcome(status="failed", error_category="step_error", error="duplicate key", failed_step="load",
                          retryable=False, log_tail="tail of the attempt")


def setup(db, clock):
    add_channel(db, clock.now(), tenant="acme", name="rec", kind="recording", audience="customer")
    wf = workflow(db, clock.now(), cadence=DAILY)
    return wf, RecordingTransport()


def deliver(db, clock, recording):
    Notifier(db, "n1", {"recording": recording}, dashboard_url=DASHBOARD).run_once(clock.now())
    return [r.message.rendered for r in recording.messages]


def plant_step_log(db, run_id):
    """The step record the worker leaves for the failed step (its log, as a worker would store it)."""
    with db.connection() as conn:
        conn.execute("""INSERT INTO attempt_steps (attempt_id, run_scheduled_for, tenant_id, step, position, status, log)
                        SELECT id, run_scheduled_for, tenant_id, 'load', 0, 'failed', %s FROM attempts WHERE run_id = %s""",
                     (STEP_LOG, run_id))


def everything(rendered) -> str:
    return "\n".join([rendered.subject, rendered.text, rendered.slack_text, str(rendered.slack_blocks),
                      rendered.slack_parent_text, str(rendered.slack_parent_blocks), str(rendered.payload)])


def fail_one_tick(db, clock, wf):
    due = clock.now().replace(hour=2, minute=0) + timedelta(days=1)
    clock.set(due)
    run = create_tick(db, wf, due, clock.now())
    attempt_once(db, run, failing_outcome(), clock.advance(60), worker="worker-a@host")
    plant_step_log(db, run.id)
    OutcomePoller(db, "p1").run_once(clock.advance(5))
    with db.transaction() as store:
        [attempt] = store.ledger.list_attempts(run.id)
    return due, run, attempt


def test_a_failed_tick_message_says_tick_due_attempt_owner_log_and_link(db, clock):
    wf, recording = setup(db, clock)
    due, run, attempt = fail_one_tick(db, clock, wf)
    [alert] = alerts_of(db, wf)
    [opened] = deliver(db, clock, recording)
    text = opened.text
    assert f"Tick:           {isoformat_z(due)} · run {run.id} (failed)" in text
    assert f"Due:            {isoformat_z(due)}" in text
    assert "Deadline expired" not in text  # the run failed; no deadline ran out
    assert (f"Last attempt:   #1 (failed) on worker-a@host, started {isoformat_z(attempt.started_at)}, "
            f"ended {isoformat_z(attempt.finished_at)}") in text
    assert f"Owner:          {alert.owner}" in text
    assert "ERROR: duplicate key value violates unique constraint orders_pkey" in text  # the step's own log
    assert f"Details: {DASHBOARD}/dashboard/alerts/{alert.id}" in text
    # Slack carries the same facts
    assert f"*Tick:* {slack_date(due)}" in opened.slack_text and "worker-a@host" in opened.slack_text
    assert "orders_pkey" in str(opened.slack_blocks) and f"/dashboard/alerts/{alert.id}" in str(opened.slack_blocks)
    # the webhook body (which PagerDuty and Teams read) too
    facts = opened.payload["tick"]
    assert facts["tick"] == isoformat_z(due) and facts["due_at"] == isoformat_z(due) and facts["run_id"] == run.id
    assert facts["deadline_expired_at"] is None
    assert facts["last_attempt"] == {"number": 1, "status": "failed", "worker": "worker-a@host",
                                     "started_at": isoformat_z(attempt.started_at),
                                     "finished_at": isoformat_z(attempt.finished_at)}
    assert "orders_pkey" in opened.payload["log_tail"]
    assert opened.payload["alert"]["owner"] == alert.owner
    assert opened.payload["alert"]["link"] == f"{DASHBOARD}/dashboard/alerts/{alert.id}"


def test_a_missed_tick_message_says_when_its_deadline_expired(db, clock):
    wf, recording = setup(db, clock)
    due = clock.now().replace(hour=2, minute=0) + timedelta(days=1)
    clock.set(due)
    run = create_tick(db, wf, due, clock.now())  # queued, never picked up by a worker
    clock.set(run.deadline_at + timedelta(seconds=30))
    DeadlineDetector(db).run_once(clock.now())
    [alert] = alerts_of(db, wf)
    [opened] = deliver(db, clock, recording)
    text = opened.text
    assert f"Tick:           {isoformat_z(due)} · run {run.id} (missed)" in text
    assert f"Due:            {isoformat_z(due)}" in text
    assert f"Deadline expired: {isoformat_z(run.deadline_at)}" in text
    assert "Last attempt:   #1 (cancelled) on no worker, started —, ended" in text
    assert f"Owner:          {alert.owner}" in text
    assert f"{DASHBOARD}/dashboard/alerts/{alert.id}" in text
    assert f"*Deadline expired:* {slack_date(run.deadline_at)}" in opened.slack_text
    assert f"*Deadline expired:* {slack_date(run.deadline_at)}" in opened.slack_parent_text
    assert opened.payload["tick"]["deadline_expired_at"] == isoformat_z(run.deadline_at)
    assert opened.payload["tick"]["last_attempt"]["status"] == "cancelled"


def test_a_secret_in_a_steps_log_never_reaches_a_message_and_the_tail_is_bounded(db, clock):
    wf, recording = setup(db, clock)
    fail_one_tick(db, clock, wf)
    [opened] = deliver(db, clock, recording)
    sent = everything(opened)
    for secret in SECRETS:
        assert secret not in sent, secret
    assert "password=[redacted]" in sent and "orders_pkey" in sent
    assert "batch 5 loaded" not in sent  # bounded: only the tail of a long log travels
    assert opened.payload["log_tail"].count("\n") < 15


def test_the_resolution_is_short_recovered_at_and_by_which_run_without_the_log(db, clock):
    wf, recording = setup(db, clock)
    fail_one_tick(db, clock, wf)
    deliver(db, clock, recording)
    poller = OutcomePoller(db, "p1")
    next_tick = clock.now().replace(hour=2, minute=0) + timedelta(days=1)
    recovered = tick(db, poller, wf, next_tick, [OK], clock)
    [alert] = alerts_of(db, wf)
    assert alert.status == "resolved"
    resolved = deliver(db, clock, recording)[-1]
    assert resolved.payload["event"] == "resolved"
    recovered_at = isoformat_z(recovered.finished_at)
    assert f"Recovery:       recovered at {recovered_at} by the tick of {isoformat_z(next_tick)}, run {recovered.id}" \
        in resolved.text
    assert f"run {recovered.id}" in resolved.slack_text
    assert resolved.payload["tick"]["recovered"] == {"at": recovered_at, "run_id": recovered.id,
                                                    "tick": isoformat_z(next_tick)}
    for line in ("orders_pkey", "batch 39 loaded", "Log tail", "Last attempt", "duplicate key", "Last error"):
        assert line not in resolved.text and line not in resolved.slack_text, line
    assert resolved.payload["log_tail"] is None
    assert not any("```" in str(block) for block in resolved.slack_blocks)


def test_the_messages_link_opens_the_alert_page_with_the_same_facts(db, clock):
    wf, recording = setup(db, clock)
    due, run, attempt = fail_one_tick(db, clock, wf)
    [opened] = deliver(db, clock, recording)
    link = opened.payload["alert"]["link"]
    path = link.removeprefix(DASHBOARD)
    assert path.startswith("/dashboard/alerts/")
    member = make_token(db, clock.now(), tenant="acme")
    with live_server(db, clock) as base, httpx.Client(base_url=base, follow_redirects=True) as client:
        anonymous = client.get(path, follow_redirects=False)
        assert anonymous.status_code in (302, 303, 307)  # to the login page, not the alert
        page = client.get(path, params={"token": member})
        assert page.status_code == 200
        html = page.text
        again = client.get(path)  # the cookie now carries the login
        assert again.status_code == 200
    assert f"run {run.id}" in html and isoformat_z(due).replace("T", " ") in html
    assert "#1 (failed) on worker-a@host" in html
    assert "orders_pkey" in html
    for secret in SECRETS:
        assert secret not in html, secret


def test_pagerduty_and_teams_carry_the_tick_facts_and_the_tail_from_the_same_message(db, clock):
    from tickwarden.models import Channel
    from tickwarden.transports.base import OutgoingMessage
    from tickwarden.transports.pagerduty import event_body
    from tickwarden.transports.teams import card

    wf, recording = setup(db, clock)
    due, run, attempt = fail_one_tick(db, clock, wf)
    [opened] = deliver(db, clock, recording)
    channel = Channel(id=1, tenant_id=None, name="pager", kind="pagerduty", audience="engineering", config={},
                      secret_ref=None, enabled=True, disabled_reason=None, disabled_at=None, created_at=clock.now())
    message = OutgoingMessage(channel=channel, rendered=opened, key="k", alert_id=1, thread=None, sent_at=clock.now())
    details = event_body(message, "routing", "trigger")["payload"]["custom_details"]
    assert details["tick"]["tick"] == isoformat_z(due) and details["tick"]["last_attempt"]["worker"] == "worker-a@host"
    assert "orders_pkey" in details["log_tail"] and details["link"].endswith(f"/dashboard/alerts/{details['alert']}")
    body = card(message)["attachments"][0]["content"]["body"]
    rows = {fact["title"]: fact["value"] for fact in body[1]["facts"]}
    assert rows["Tick"] == isoformat_z(due) and rows["Due"] == isoformat_z(due)
    assert rows["Last attempt"].startswith("#1 (failed) on worker-a@host")
    assert any("orders\\_pkey" in block.get("text", "") for block in body[2:])
    for secret in SECRETS:
        assert secret not in str(details) + str(body), secret
