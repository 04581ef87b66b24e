from datetime import timedelta

import pytest

from tests.integration.fake_servers import SlackFake
from tests.integration.notify_builders import add_channel, add_event, channel_row, open_alert, outbox
from tickwarden.notifier import Notifier
from tickwarden.transports.slack import SlackTransport

TOKEN = "xoxb-1111-2222-test"


@pytest.fixture
def slack(monkeypatch):
    monkeypatch.setenv("TW_TEST_SLACK_TOKEN", TOKEN)
    server = SlackFake(token=TOKEN).start()
    yield server
    server.stop()


def slack_channel(db, clock, slack, tenant="acme"):
    return add_channel(db, clock.now(), tenant=tenant, name="alerts", kind="slack", audience="customer",
                       config={"channel": "C0CUSTOMER", "base_url": slack.base_url},
                       secret_ref="env:TW_TEST_SLACK_TOKEN")


def notifier(db, replica="n1", **kwargs):
    return Notifier(db, replica, {"slack": SlackTransport(timeout=5)}, base_backoff=30, **kwargs)


def test_the_first_message_opens_a_thread_and_later_events_reply_in_it(db, clock, slack):
    channel = slack_channel(db, clock, slack)
    alert = open_alert(db, clock.now())
    n = notifier(db)
    n.run_once(clock.now())
    add_event(db, alert, "escalated", clock.advance(600))
    add_event(db, alert, "resolved", clock.advance(3600))
    n.run_once(clock.now())

    assert len(slack.posts) == 3
    first, escalated, resolved = slack.posts
    assert "thread_ts" not in first and "alert opened" in first["text"]
    assert escalated["thread_ts"] == first["ts"] and "Escalated to CRITICAL" in escalated["text"]
    assert resolved["thread_ts"] == first["ts"] and "Resolved" in resolved["text"]
    # the parent is updated to show the current state before each reply
    assert [u["ts"] for u in slack.updates] == [first["ts"], first["ts"]]
    assert slack.updates[-1]["channel"] == "C0CUSTOMER"
    assert "RESOLVED" in slack.updates[-1]["text"] and "downtime 1h 10m" in slack.updates[-1]["text"]
    with db.connection() as conn:
        thread = conn.execute("SELECT thread_key, parent_ref FROM notification_threads WHERE alert_id = %s"
                              " AND channel_id = %s", (alert, channel.id)).fetchone()
    assert thread == (first["ts"], f"C0CUSTOMER:{first['ts']}")
    assert [r["status"] for r in outbox(db)] == ["sent", "sent", "sent"]


def test_the_first_message_carries_the_alert_facts_and_the_log_tail(db, clock, slack):
    slack_channel(db, clock, slack)
    open_alert(db, clock.now(), error="relation sales does not exist", log_tail="loading\njoining orders\nERROR: boom")
    notifier(db).run_once(clock.now())
    [post] = slack.posts
    text = post["text"] + str(post["blocks"])
    for fact in ("acme/nightly-pipeline", "warning", "engineering", "Failures:* 1", "|2026-11-30 01:55 UTC>",
                 "relation sales does not exist", "joining orders", "/dashboard/alerts/1"):
        assert fact in text, fact


def test_slack_down_is_retried_with_backoff_and_delivered_once_in_the_same_thread(db, clock, slack):
    slack_channel(db, clock, slack)
    alert = open_alert(db, clock.now())
    n = notifier(db)
    n.run_once(clock.now())
    slack.fail_status = 500
    add_event(db, alert, "escalated", clock.advance(60))
    waits = []
    for _ in range(3):
        wake = n.run_once(clock.now())
        row = outbox(db)[-1]
        assert row["status"] == "failed" and row["next_attempt_at"] > clock.now()
        waits.append((row["next_attempt_at"] - clock.now()).total_seconds())
        assert wake <= row["next_attempt_at"]
        clock.set(row["next_attempt_at"])
    assert waits[0] < waits[1] < waits[2]  # exponential back-off
    assert 30 <= waits[0] <= 37.5
    slack.fail_status = None
    n.run_once(clock.now())
    n.run_once(clock.advance(3600))
    assert len(slack.posts) == 2
    assert slack.posts[1]["thread_ts"] == slack.posts[0]["ts"]
    row = outbox(db)[-1]
    assert row["status"] == "sent" and row["tries"] == 4


def test_a_later_event_waits_until_its_thread_exists(db, clock, slack):
    slack_channel(db, clock, slack)
    slack.fail_status = 503
    alert = open_alert(db, clock.now())
    n = notifier(db)
    n.run_once(clock.now())
    add_event(db, alert, "escalated", clock.advance(120))
    n.run_once(clock.now())  # the escalation is due, but the thread's first message is not sent yet
    assert [r["status"] for r in outbox(db)] == ["failed", "pending"]
    slack.fail_status = None
    n.run_once(clock.advance(3600))
    assert len(slack.posts) == 2
    assert "thread_ts" not in slack.posts[0] and slack.posts[1]["thread_ts"] == slack.posts[0]["ts"]


def test_rate_limiting_honours_retry_after(db, clock, slack):
    slack_channel(db, clock, slack)
    slack.fail_status, slack.retry_after = 429, 900
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    row = outbox(db)[0]
    assert row["status"] == "failed" and row["next_attempt_at"] == clock.now() + timedelta(seconds=900)


def test_a_permanent_error_disables_the_channel_and_gives_up_its_backlog(db, clock, slack):
    channel = slack_channel(db, clock, slack)
    slack.fail_error = "channel_not_found"
    first = open_alert(db, clock.now())
    open_alert(db, clock.now(), workflow="hourly-check")
    add_event(db, first, "escalated", clock.now())
    notifier(db).run_once(clock.now())
    row = channel_row(db, channel.id)
    assert not row["enabled"] and "channel_not_found" in row["disabled_reason"] and row["disabled_at"] == clock.now()
    assert {r["status"] for r in outbox(db)} == {"dead"}
    assert all("channel_not_found" in r["last_error"] for r in outbox(db))
    # a disabled channel is no longer fanned out to
    later = open_alert(db, clock.advance(60), workflow="third")
    assert [r for r in outbox(db) if r["alert_id"] == later] == []


def test_a_bad_token_is_permanent(db, clock, slack, monkeypatch):
    channel = slack_channel(db, clock, slack)
    monkeypatch.setenv("TW_TEST_SLACK_TOKEN", "xoxb-wrong")
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    assert "invalid_auth" in channel_row(db, channel.id)["disabled_reason"]


def test_it_gives_up_after_max_tries_and_the_row_stays_visible(db, clock, slack):
    channel = slack_channel(db, clock, slack)
    slack.fail_status = 502
    open_alert(db, clock.now())
    n = notifier(db, max_tries=3)
    for _ in range(5):
        n.run_once(clock.now())
        clock.advance(7200)
    row = outbox(db)[0]
    assert row["status"] == "dead" and row["tries"] == 3 and "502" in row["last_error"]
    assert channel_row(db, channel.id)["enabled"]  # transient trouble never disables a channel
    assert len(slack.requests) == 3


def test_three_replicas_keep_every_slack_thread_whole(db, clock, slack, schema):
    import threading

    from tests.dbutil import TEST_URL
    from tickwarden.db import Database

    slack_channel(db, clock, slack)
    databases = [Database(TEST_URL, schema=schema, min_size=1, max_size=2) for _ in range(3)]
    replicas = [Notifier(d, f"r{i}", {"slack": SlackTransport(timeout=5)}, batch=2) for i, d in enumerate(databases)]
    try:
        alerts = [open_alert(db, clock.now(), workflow=f"wf{i}") for i in range(6)]
        for step in range(12):
            now = clock.advance(5)
            if step == 2:
                for alert in alerts:
                    add_event(db, alert, "escalated", now)
            if step == 4:
                for alert in alerts:
                    add_event(db, alert, "resolved", now)
            threads = [threading.Thread(target=r.run_once, args=(now,)) for r in replicas]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        for d in databases:
            d.close()
    assert len(slack.posts) == 18 and {r["status"] for r in outbox(db)} == {"sent"}
    parents = [p for p in slack.posts if "thread_ts" not in p]
    assert len(parents) == 6  # one thread per alert, never a second first message
    for parent in parents:
        replies = [p for p in slack.posts if p.get("thread_ts") == parent["ts"]]
        assert len(replies) == 2 and "Escalated" in replies[0]["text"] and "Resolved" in replies[1]["text"]
    assert len(slack.updates) == 12
