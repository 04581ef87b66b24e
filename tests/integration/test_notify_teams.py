"""Microsoft Teams through a Workflows webhook: one Adaptive Card an event, its URL kept secret."""

import json

import pytest

from tests.integration.fake_servers import TeamsFake
from tests.integration.notify_builders import (
    add_channel,
    add_event,
    channel_row,
    open_alert,
    outbox,
)
from tickwarden.notifier import Notifier
from tickwarden.transports.teams import TeamsTransport


@pytest.fixture
def teams(monkeypatch):
    server = TeamsFake().start()
    monkeypatch.setenv("TW_TEST_TEAMS_URL", server.webhook_url)
    yield server
    server.stop()


def teams_channel(db, clock, *, tenant="acme"):
    return add_channel(db, clock.now(), tenant=tenant, name="acme-teams", kind="teams", audience="customer",
                       secret_ref="env:TW_TEST_TEAMS_URL")


def notifier(db):
    return Notifier(db, "n1", {"teams": TeamsTransport(timeout=5)}, base_backoff=30,
                    dashboard_url="https://tickwarden.example.com")


def facts(card):
    [fact_set] = [block for block in card["body"] if block["type"] == "FactSet"]
    return {fact["title"]: fact["value"] for fact in fact_set["facts"]}


def test_each_event_is_an_adaptive_card_with_its_facts_and_a_link_to_the_alert(db, clock, teams):
    teams_channel(db, clock)
    alert = open_alert(db, clock.now(), severity="critical")
    n = notifier(db)
    n.run_once(clock.now())
    add_event(db, alert, "resolved", clock.advance(3600))
    n.run_once(clock.now())

    opened, resolved = teams.cards
    assert opened["body"][0]["text"].startswith("CRITICAL alert opened") and opened["body"][0]["color"] == "Attention"
    assert facts(opened)["Tenant"] == "acme" and facts(opened)["Severity"] == "CRITICAL"
    assert facts(opened)["Alert"] == f"#{alert}"
    assert opened["actions"] == [{"type": "Action.OpenUrl", "title": "View alert",
                                  "url": f"https://tickwarden.example.com/dashboard/alerts/{alert}"}]
    assert resolved["body"][0]["color"] == "Good" and "Downtime (s)" in facts(resolved)
    assert not any(block.get("fontType") == "Monospace" for block in resolved["body"]), "no error once resolved"
    assert [r["status"] for r in outbox(db)] == ["sent", "sent"]


def test_a_tenant_error_cannot_become_a_link_or_leak_a_secret_in_the_card(db, clock, teams):
    teams_channel(db, clock)
    open_alert(db, clock.now(), error="[Reset your password](https://evil.example/login) token=abc123secret")
    notifier(db).run_once(clock.now())
    [card] = teams.cards
    text = json.dumps(card)
    assert "](https://evil" not in text and "https://evil" not in text
    assert "abc123secret" not in text


@pytest.mark.parametrize("throttled_in_body", [True, False])
def test_throttling_is_retried_whether_teams_says_so_in_the_status_or_the_text(db, clock, teams, throttled_in_body):
    channel = teams_channel(db, clock)
    if throttled_in_body:
        teams.throttle_in_body = True
    else:
        teams.fail_status, teams.retry_after = 429, 120
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    [row] = outbox(db)
    assert row["status"] == "failed" and channel_row(db, channel.id)["enabled"] is True
    teams.throttle_in_body, teams.fail_status = False, None
    clock.set(row["next_attempt_at"])
    notifier(db).run_once(clock.now())
    assert outbox(db)[0]["status"] == "sent" and len(teams.cards) == 1


def test_a_revoked_webhook_disables_the_channel_without_showing_its_url(db, clock, teams, monkeypatch):
    monkeypatch.setenv("TW_TEST_TEAMS_URL", teams.webhook_url.replace("SIGNATURE0SECRET", "REVOKED0SIG"))
    channel = teams_channel(db, clock)
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    row = channel_row(db, channel.id)
    assert row["enabled"] is False and "HTTP 401" in row["disabled_reason"]
    recorded = json.dumps([row["disabled_reason"], *[r["last_error"] for r in outbox(db)]])
    assert "REVOKED0SIG" not in recorded and "workflows" not in recorded


def test_a_webhook_secret_that_is_not_a_url_is_refused_before_sending(db, clock, teams, monkeypatch):
    monkeypatch.setenv("TW_TEST_TEAMS_URL", "file:///etc/passwd")
    channel = teams_channel(db, clock)
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    assert channel_row(db, channel.id)["enabled"] is False and not teams.requests
