"""The overview shows notifications that are not getting through: failing channels and the backlog."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from tests.apiutil import live_server, make_token, seed_tenant


@pytest.fixture
def fleet(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    return acme, make_token(db, clock.now(), name="oncall")


def _overview(base: str, token: str) -> str:
    page = httpx.get(f"{base}/dashboard", cookies={"tickwarden_token": token}, timeout=10)
    assert page.status_code == 200
    return page.text


def _queue(db, acme, now, status, tries=0, error=None, age=timedelta(minutes=3)):
    with db.connection() as conn, conn.transaction():
        event = conn.execute("SELECT id FROM alert_events WHERE alert_id = %s", (acme.alert_id,)).fetchone()[0]
        conn.execute("DELETE FROM notification_outbox")
        conn.execute(
            "INSERT INTO notification_outbox (tenant_id, event_id, alert_id, channel_id, status, tries,"
            " next_attempt_at, created_at, last_error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (acme.tenant_id, event, acme.alert_id, acme.channel_id, status, tries, now, now - age, error))


def test_it_shows_a_failing_channel_and_its_backlog_on_the_overview(db, clock, fleet):
    acme, platform = fleet
    _queue(db, acme, clock.now(), "failed", tries=4, error="webhook answered 503")
    with live_server(db, clock) as base:
        page = _overview(base, platform)
    assert 'id="failing-channels"' in page
    assert "Notifications are not getting through" in page and "acme/acme-alerts</span> (recording, 1 waiting)" in page
    assert 'data-channel="acme/acme-alerts"' in page and "webhook answered 503" in page


def test_a_pending_notification_is_backlog_but_not_an_alarm(db, clock, fleet):
    acme, platform = fleet
    _queue(db, acme, clock.now(), "pending")
    with live_server(db, clock) as base:
        page = _overview(base, platform)
    assert 'data-channel="acme/acme-alerts"' in page and 'id="failing-channels"' not in page


def test_it_says_every_notification_was_delivered_when_none_waits(db, clock, fleet):
    acme, platform = fleet
    _queue(db, acme, clock.now(), "dead", tries=9, error="gone", age=timedelta(days=3))  # given up long ago
    with live_server(db, clock) as base:
        page = _overview(base, platform)
    assert "Every notification has been delivered." in page and 'id="failing-channels"' not in page
