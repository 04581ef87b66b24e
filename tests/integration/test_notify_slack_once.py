"""A Slack message is never posted twice, even when its sender dies between Slack accepting it and
the outbox recording it: the delivery carries its key as message metadata, and a re-send of a
delivery whose outcome is unknown looks for that key first (a local Slack Web API stand-in)."""

from datetime import timedelta

import pytest

from tests.integration.fake_servers import SlackFake
from tests.integration.notify_builders import add_channel, add_event, channel_row, open_alert, outbox
from tickwarden.notifier import Notifier
from tickwarden.transports.base import Delivery, OutgoingMessage
from tickwarden.transports.slack import SlackTransport

TOKEN = "xoxb-3333-4444-test"


class Died(BaseException):
    """The sender process stops dead: nothing after this line of its code runs."""


class DiesAfterSlackAnswers:
    """The real Slack transport, in a process that dies once right after Slack accepted a post."""

    def __init__(self, die_on: str) -> None:
        self.inner = SlackTransport(timeout=5)
        self.die_on = die_on
        self.died = False

    def send(self, message: OutgoingMessage) -> Delivery:
        delivery = self.inner.send(message)
        if not self.died and self.die_on in message.key:
            self.died = True
            raise Died()
        return delivery


@pytest.fixture
def slack(monkeypatch, clock):
    monkeypatch.setenv("TW_TEST_SLACK_TOKEN", TOKEN)
    # messages get ts in the clock's time, as Slack's do in the service's
    server = SlackFake(token=TOKEN, epoch=int(clock.now().timestamp())).start()
    yield server
    server.stop()


def slack_channel(db, clock, slack, channel="C0CUSTOMER"):
    return add_channel(db, clock.now(), tenant="acme", name="alerts", kind="slack", audience="customer",
                       config={"channel": channel, "base_url": slack.base_url}, secret_ref="env:TW_TEST_SLACK_TOKEN")


def crash_then_recover(db, clock, die_on):
    """Run a replica that dies after Slack accepts the delivery keyed `die_on`, then a fresh one after the lease."""
    dying = DiesAfterSlackAnswers(die_on)
    with pytest.raises(Died):
        Notifier(db, "dies", {"slack": dying}, lease_seconds=600).run_once(clock.now())
    assert dying.died
    [row] = [r for r in outbox(db) if r["status"] == "sending"]
    assert row["locked_by"] == "dies"
    Notifier(db, "survivor", {"slack": SlackTransport(timeout=5)}).run_once(clock.advance(601))
    return row["id"]


def test_a_first_message_posted_before_the_sender_died_is_found_not_posted_again(db, clock, slack):
    channel = slack_channel(db, clock, slack)
    alert = open_alert(db, clock.now())
    row_id = crash_then_recover(db, clock, "event-")

    assert len(slack.posts) == 1  # one message in Slack, not two
    first = slack.posts[0]
    assert first["metadata"]["event_type"] == "tickwarden_delivery"
    assert first["metadata"]["event_payload"]["delivery"].startswith(f"alert-{alert}.event-")
    assert slack.lookups == ["conversations.history"]
    [row] = [r for r in outbox(db) if r["id"] == row_id]
    assert row["status"] == "sent" and row["maybe_sent"]
    with db.connection() as conn:
        thread = conn.execute("SELECT thread_key, parent_ref FROM notification_threads WHERE alert_id = %s"
                              " AND channel_id = %s", (alert, channel.id)).fetchone()
    assert thread == (first["ts"], f"C0CUSTOMER:{first['ts']}")  # the found message is the thread

    # the thread goes on under the found message
    add_event(db, alert, "escalated", clock.advance(60))
    Notifier(db, "survivor", {"slack": SlackTransport(timeout=5)}).run_once(clock.now())
    assert len(slack.posts) == 2 and slack.posts[1]["thread_ts"] == first["ts"]
    assert slack.lookups == ["conversations.history"]  # an ordinary delivery does not look


def test_a_reply_posted_before_the_sender_died_is_found_in_the_thread(db, clock, slack):
    slack_channel(db, clock, slack)
    alert = open_alert(db, clock.now())
    n = Notifier(db, "n1", {"slack": SlackTransport(timeout=5)})
    n.run_once(clock.now())
    escalation = add_event(db, alert, "escalated", clock.advance(60))
    crash_then_recover(db, clock, f"event-{escalation}.")

    assert len(slack.posts) == 2
    assert slack.posts[1]["thread_ts"] == slack.posts[0]["ts"]
    assert slack.lookups == ["conversations.replies"]
    assert [r["status"] for r in outbox(db)] == ["sent", "sent"]
    # the next event replies once more, in order
    add_event(db, alert, "resolved", clock.advance(60))
    n.run_once(clock.now())
    assert len(slack.posts) == 3 and "Resolved" in slack.posts[2]["text"]


def test_a_sender_that_died_before_slack_took_the_message_posts_it_once_after_the_lease(db, clock, slack):
    slack_channel(db, clock, slack)
    open_alert(db, clock.now())

    class DiesBeforeSending:
        def send(self, message: OutgoingMessage) -> Delivery:
            raise Died()

    with pytest.raises(Died):
        Notifier(db, "dies", {"slack": DiesBeforeSending()}).run_once(clock.now())
    assert slack.posts == []
    Notifier(db, "survivor", {"slack": SlackTransport(timeout=5)}).run_once(clock.advance(601))
    assert len(slack.posts) == 1 and slack.lookups == ["conversations.history"]
    assert [r["status"] for r in outbox(db)] == ["sent"]


def test_a_post_whose_answer_never_came_is_looked_up_on_the_retry(db, clock, slack):
    slack_channel(db, clock, slack)
    open_alert(db, clock.now())
    slack.delay_after_post = 2.5  # Slack takes the message, the client gives up waiting
    transport = SlackTransport(timeout=1)
    n = Notifier(db, "n1", {"slack": transport})
    n.run_once(clock.now())
    [row] = outbox(db)
    assert row["status"] == "failed" and row["maybe_sent"]
    assert len(slack.posts) == 1
    slack.delay_after_post = 0
    n.run_once(row["next_attempt_at"])
    assert len(slack.posts) == 1 and slack.lookups == ["conversations.history"]
    assert [r["status"] for r in outbox(db)] == ["sent"]


def test_an_ordinary_retry_does_not_look_up(db, clock, slack):
    slack_channel(db, clock, slack)
    open_alert(db, clock.now())
    slack.fail_status, slack.retry_after = 429, 60
    n = Notifier(db, "n1", {"slack": SlackTransport(timeout=5)})
    n.run_once(clock.now())
    [row] = outbox(db)
    assert row["status"] == "failed" and not row["maybe_sent"]  # Slack said no: nothing went out
    slack.fail_status = None
    n.run_once(clock.advance(120))
    assert len(slack.posts) == 1 and slack.lookups == []


def test_a_lookup_in_a_channel_given_by_name_disables_it_with_a_reason(db, clock, slack):
    channel = slack_channel(db, clock, slack, channel="#alerts")
    open_alert(db, clock.now())

    class DiesBeforeSending:
        def send(self, message: OutgoingMessage) -> Delivery:
            raise Died()

    with pytest.raises(Died):
        Notifier(db, "dies", {"slack": DiesBeforeSending()}).run_once(clock.now())
    Notifier(db, "survivor", {"slack": SlackTransport(timeout=5)}).run_once(clock.now() + timedelta(seconds=601))
    assert slack.posts == []  # never posted without having looked
    reason = channel_row(db, channel.id)["disabled_reason"]
    assert "channel's id" in reason
