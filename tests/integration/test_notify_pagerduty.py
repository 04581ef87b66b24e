"""PagerDuty through the Events API v2: one incident per alert, triggered, updated and resolved; never twice."""

import json

import pytest

from tests.integration.fake_servers import PagerDutyFake
from tests.integration.notify_builders import (
    add_channel,
    add_event,
    channel_row,
    open_alert,
    outbox,
)
from tickwarden.notifier import Notifier, send_test_message
from tickwarden.transports.pagerduty import PagerDutyTransport
from tickwarden.workflow_file import ChannelSpec


@pytest.fixture
def pagerduty(monkeypatch):
    server = PagerDutyFake().start()
    monkeypatch.setenv("TW_TEST_PD_KEY", server.routing_key)
    yield server
    server.stop()


def pd_channel(db, clock, server, *, tenant=None, audience="engineering", secret_ref="env:TW_TEST_PD_KEY"):
    return add_channel(db, clock.now(), tenant=tenant, name="oncall", kind="pagerduty", audience=audience,
                       config={"url": server.events_url}, secret_ref=secret_ref)


def notifier(db):
    return Notifier(db, "n1", {"pagerduty": PagerDutyTransport(timeout=5)}, base_backoff=30,
                    dashboard_url="https://tickwarden.example.com")


def test_an_alert_is_one_incident_triggered_escalated_and_resolved_by_its_dedup_key(db, clock, pagerduty):
    pd_channel(db, clock, pagerduty)
    alert = open_alert(db, clock.now(), severity="warning")
    n = notifier(db)
    n.run_once(clock.now())
    add_event(db, alert, "escalated", clock.advance(3600))
    n.run_once(clock.now())
    add_event(db, alert, "resolved", clock.advance(600))
    n.run_once(clock.now())

    opened, escalated, resolved = pagerduty.events
    assert [e["event_action"] for e in pagerduty.events] == ["trigger", "trigger", "resolve"]
    assert {e["dedup_key"] for e in pagerduty.events} == {f"tickwarden-alert-{alert}"}
    assert pagerduty.incidents == {f"tickwarden-alert-{alert}": "resolved"}
    assert opened["payload"]["severity"] == "warning" and escalated["payload"]["severity"] == "critical"
    assert opened["payload"]["group"] == "acme" and opened["payload"]["component"] == "nightly-pipeline"
    assert opened["payload"]["summary"].startswith("WARNING alert opened")
    assert opened["links"] == [{"href": f"https://tickwarden.example.com/dashboard/alerts/{alert}",
                                "text": "The alert in tickwarden"}]
    assert opened["payload"]["timestamp"].endswith("Z")
    assert "payload" not in resolved
    assert [r["status"] for r in outbox(db)] == ["sent", "sent", "sent"]


def test_a_delivery_sent_again_after_a_crash_folds_into_the_same_incident(db, clock, pagerduty):
    pd_channel(db, clock, pagerduty)
    open_alert(db, clock.now())
    n = notifier(db)
    n.run_once(clock.now())
    # the sender died after PagerDuty accepted the event and before the outbox recorded it
    with db.connection() as conn:
        conn.execute("UPDATE notification_outbox SET status = 'sending', locked_until = %s, locked_by = 'dead'",
                     (clock.now(),))
    n.run_once(clock.advance(1))
    assert len(pagerduty.events) == 2
    assert len(pagerduty.incidents) == 1 and list(pagerduty.incidents.values()) == ["triggered"]


def test_a_rejected_routing_key_disables_the_channel_and_never_shows_the_key(db, clock, pagerduty, monkeypatch):
    monkeypatch.setenv("TW_TEST_PD_KEY", "WRONGKEY0000000000000000000000000")
    channel = pd_channel(db, clock, pagerduty)
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    row = channel_row(db, channel.id)
    assert row["enabled"] is False and "HTTP 400" in row["disabled_reason"]
    assert "WRONGKEY" not in json.dumps([row["disabled_reason"], *[r["last_error"] for r in outbox(db)]])


@pytest.mark.parametrize("status", [429, 500, 503])
def test_throttling_and_outages_are_retried_after_what_pagerduty_asks(db, clock, pagerduty, status):
    channel = pd_channel(db, clock, pagerduty)
    pagerduty.fail_status, pagerduty.retry_after = status, 600
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    [row] = outbox(db)
    assert row["status"] == "failed" and channel_row(db, channel.id)["enabled"] is True
    assert (row["next_attempt_at"] - clock.now()).total_seconds() >= 600


def test_a_channel_without_a_routing_key_is_a_permanent_error(db, clock, pagerduty):
    channel = pd_channel(db, clock, pagerduty, secret_ref=None)
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    assert channel_row(db, channel.id)["enabled"] is False and not pagerduty.events


def test_a_tenant_error_reaches_pagerduty_redacted(db, clock, pagerduty):
    pd_channel(db, clock, pagerduty, tenant="acme", audience="customer")
    open_alert(db, clock.now(), error="login failed: password=hunter2 for postgres://app:s3cret@db/x",
               log_tail="token=abcdef0123456789")
    notifier(db).run_once(clock.now())
    [event] = pagerduty.events
    text = json.dumps(event)
    assert "hunter2" not in text and "s3cret" not in text and "abcdef0123456789" not in text
    assert event["payload"]["custom_details"]["error"].startswith("login failed")


def test_a_channel_test_triggers_and_resolves_its_own_incident(db, clock, pagerduty):
    channel = pd_channel(db, clock, pagerduty)
    send_test_message(channel, PagerDutyTransport(timeout=5), clock.now())
    assert [e["event_action"] for e in pagerduty.events] == ["trigger", "resolve"]
    assert pagerduty.incidents == {f"tickwarden-test-channel-{channel.id}": "resolved"}


def test_workflow_files_accept_pagerduty_and_teams_channels():
    for kind in ("pagerduty", "teams"):
        assert ChannelSpec(name="oncall", kind=kind, secret_ref="secret:PD").kind == kind
