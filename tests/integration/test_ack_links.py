"""The Slack message's buttons and its signed acknowledge link, against the real app on a local port:
GET confirms and never acts, POST acknowledges through the alert state machine once; forged,
altered, expired and replayed links are refused with a page that says why."""

import re
import threading
from datetime import timedelta

import httpx
import pytest

from tests.apiutil import live_server
from tests.integration.fake_servers import SlackFake
from tests.integration.notify_builders import add_channel, add_event, open_alert, outbox
from tickwarden import ack_links
from tickwarden.notifier import Notifier
from tickwarden.transports.slack import SlackTransport

TOKEN = "xoxb-5555-6666-test"
SECRET = "platform-secret-for-links"


@pytest.fixture
def slack(monkeypatch, clock):
    monkeypatch.setenv("TW_TEST_SLACK_TOKEN", TOKEN)
    monkeypatch.setenv("TICKWARDEN_SECRET_KEY", SECRET)
    monkeypatch.delenv("TICKWARDEN_SECRET_KEYS_OLD", raising=False)
    server = SlackFake(token=TOKEN).start()
    yield server
    server.stop()


@pytest.fixture
def site(db, clock):
    with live_server(db, clock) as url:
        yield url


def deliver(db, clock, slack, site):
    add_channel(db, clock.now(), tenant="acme", name="alerts", kind="slack", audience="customer",
                config={"channel": "C0CUSTOMER", "base_url": slack.base_url}, secret_ref="env:TW_TEST_SLACK_TOKEN")
    alert = open_alert(db, clock.now())
    Notifier(db, "n1", {"slack": SlackTransport(timeout=5)}, dashboard_url=site + "/").run_once(clock.now())
    return alert


def buttons(post):
    [actions] = [b for b in post["blocks"] if b["type"] == "actions"]
    return {e["text"]["text"]: e["url"] for e in actions["elements"]}


def alert_row(db, alert_id):
    with db.connection() as conn:
        return conn.execute("SELECT acknowledged_at, acknowledged_by FROM alerts WHERE id = %s", (alert_id,)).fetchone()


def test_the_message_has_buttons_and_the_link_acknowledges_once_through_the_state_machine(db, clock, slack, site):
    alert = deliver(db, clock, slack, site)
    [post] = slack.posts
    links = buttons(post)
    with db.connection() as conn:
        run_id = conn.execute("SELECT last_run_id FROM alerts WHERE id = %s", (alert,)).fetchone()[0]
    assert links["View alert"] == f"{site}/dashboard/alerts/{alert}"
    assert links["View run"] == f"{site}/dashboard/runs/{run_id}"
    ack = links["Acknowledge"]
    assert re.fullmatch(rf"{site}/ack/{alert}\.\d+\.[0-9a-f]{{16}}\.[A-Za-z0-9_-]{{43}}", ack)

    with httpx.Client() as http:
        page = http.get(ack)  # what a link preview or mail scanner does: nothing changes
        assert page.status_code == 200 and "Acknowledge this alert?" in page.text and "acme/nightly-pipeline" in page.text
        assert page.headers["referrer-policy"] == "no-referrer" and "no-store" in page.headers["cache-control"]
        assert alert_row(db, alert) == (None, None)

        done = http.post(ack, data={"name": "Ana  Lopes"})
        assert done.status_code == 200 and "is acknowledged" in done.text
        acknowledged_at, by = alert_row(db, alert)
        assert acknowledged_at == clock.now() and by == "Ana Lopes (signed link)"
        # the same event, fanned out, as from the API or the CLI
        assert [r["kind"] for r in outbox(db)] == ["opened", "acknowledged"]

        again = http.post(ack, data={})
        assert again.status_code == 409 and "a link works once" in again.text
        assert http.get(ack).status_code == 409
    assert [r["kind"] for r in outbox(db)] == ["opened", "acknowledged"]

    # the acknowledgement's reply and the parent's update carry no Acknowledge button any more
    Notifier(db, "n1", {"slack": SlackTransport(timeout=5)}, dashboard_url=site).run_once(clock.advance(30))
    assert "Acknowledge" not in buttons(slack.posts[1]) and "View alert" in buttons(slack.posts[1])
    assert "Acknowledge" not in str(slack.updates[-1]["blocks"])


def test_altered_forged_expired_and_malformed_links_are_refused_with_a_page(db, clock, slack, site):
    alert = deliver(db, clock, slack, site)
    other = open_alert(db, clock.now(), tenant="globex", workflow="billing")
    ack = buttons(slack.posts[0])["Acknowledge"]
    token = ack.rsplit("/", 1)[1]
    _, expiry, nonce, signature = token.split(".")
    cases = {
        "another alert": f"{other}.{expiry}.{nonce}.{signature}",
        "a later expiry": f"{alert}.{int(expiry) + 86400}.{nonce}.{signature}",
        "another key": ack_links.issue(other, clock.now() + timedelta(days=1), nonce, "not-the-platform-secret"),
        "garbage": "not-a-token",
        "too long": "1." + "9" * 300,
    }
    with httpx.Client() as http:
        for case, forged in cases.items():
            for method in ("GET", "POST"):
                page = http.request(method, f"{site}/ack/{forged}")
                assert page.status_code == 400, case
                assert "This acknowledge link is not valid" in page.text, case
                assert "Traceback" not in page.text
        clock.advance(int(ack_links.LINK_TTL.total_seconds()) + 1)
        for method in ("GET", "POST"):
            expired = http.request(method, ack)
            assert expired.status_code == 410 and "expired on" in expired.text
    assert alert_row(db, alert) == (None, None) and alert_row(db, other) == (None, None)


def test_a_link_to_a_resolved_alert_acknowledges_nothing(db, clock, slack, site):
    alert = deliver(db, clock, slack, site)
    ack = buttons(slack.posts[0])["Acknowledge"]
    add_event(db, alert, "resolved", clock.advance(60))
    with httpx.Client() as http:
        assert http.get(ack).status_code == 409
        page = http.post(ack)
    assert page.status_code == 409 and "already resolved" in page.text
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM ack_link_uses").fetchone()[0] == 0


def test_two_clicks_racing_acknowledge_once(db, clock, slack, site):
    alert = deliver(db, clock, slack, site)
    ack = buttons(slack.posts[0])["Acknowledge"]
    statuses: list[int] = []
    start = threading.Barrier(4)

    def click() -> None:
        start.wait()
        statuses.append(httpx.post(ack, timeout=10).status_code)

    threads = [threading.Thread(target=click) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200, 409, 409, 409]
    assert [r["kind"] for r in outbox(db)].count("acknowledged") == 1
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM ack_link_uses WHERE alert_id = %s", (alert,)).fetchone()[0] == 1


def test_links_issued_before_a_key_rotation_still_work(db, clock, slack, site, monkeypatch):
    deliver(db, clock, slack, site)
    ack = buttons(slack.posts[0])["Acknowledge"]
    monkeypatch.setenv("TICKWARDEN_SECRET_KEY", "the-new-platform-secret")
    assert httpx.get(ack).status_code == 400
    monkeypatch.setenv("TICKWARDEN_SECRET_KEYS_OLD", SECRET)
    assert httpx.post(ack).status_code == 200


def test_without_a_public_url_there_are_no_buttons(db, clock, slack):
    add_channel(db, clock.now(), tenant="acme", name="alerts", kind="slack", audience="customer",
                config={"channel": "C0CUSTOMER", "base_url": slack.base_url}, secret_ref="env:TW_TEST_SLACK_TOKEN")
    open_alert(db, clock.now())
    Notifier(db, "n1", {"slack": SlackTransport(timeout=5)}).run_once(clock.now())
    [post] = slack.posts
    assert [b for b in post["blocks"] if b["type"] == "actions"] == []  # Slack refuses relative button URLs
