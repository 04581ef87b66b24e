import jinja2
import pytest

from tests.integration.fake_servers import SlackFake, SMTPFake
from tests.integration.notify_builders import add_channel, add_event, open_alert, outbox
from tickwarden.notifier import Notifier
from tickwarden.transports.email import EmailTransport
from tickwarden.transports.slack import SlackTransport

TOKEN = "xoxb-1111-2222-test"


@pytest.fixture
def renders(monkeypatch):
    """The name of every message template rendered, in order."""
    names: list[str] = []
    render = jinja2.Template.render

    def counted(self, *args, **kwargs):
        names.append(self.name)
        return render(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Template, "render", counted)
    return names


@pytest.fixture
def slack(monkeypatch):
    monkeypatch.setenv("TW_TEST_SLACK_TOKEN", TOKEN)
    server = SlackFake(token=TOKEN).start()
    yield server
    server.stop()


@pytest.fixture
def smtp():
    server = SMTPFake().start()
    yield server
    server.stop()


def slack_channel(db, clock, slack):
    add_channel(db, clock.now(), tenant="acme", name="alerts", kind="slack", audience="customer",
                config={"channel": "C0CUSTOMER", "base_url": slack.base_url}, secret_ref="env:TW_TEST_SLACK_TOKEN")


def email_channel(db, clock, smtp):
    add_channel(db, clock.now(), tenant="acme", name="mail", kind="email", audience="customer",
                config={"host": "127.0.0.1", "port": smtp.port, "from": "alerts@tickwarden.example",
                        "to": ["oncall@acme.example"]})


def test_a_slack_delivery_renders_each_slack_template_once_and_no_mail_template(db, clock, slack, renders):
    slack_channel(db, clock, slack)
    alert = open_alert(db, clock.now())
    n = Notifier(db, "n1", {"slack": SlackTransport(timeout=5)})
    n.run_once(clock.now())
    add_event(db, alert, "escalated", clock.advance(600))
    n.run_once(clock.now())

    assert len(slack.posts) == 2 and len(slack.updates) == 1
    assert sorted(renders) == ["slack_parent.md.j2", "slack_parent.md.j2", "slack_reply.md.j2", "slack_reply.md.j2"]


def test_a_mail_delivery_renders_each_mail_template_once_and_no_slack_template(db, clock, smtp, renders):
    email_channel(db, clock, smtp)
    open_alert(db, clock.now())
    Notifier(db, "n1", {"email": EmailTransport(timeout=5)}).run_once(clock.now())

    assert len(smtp.messages) == 1
    assert sorted(renders) == ["email.html.j2", "email.txt.j2"]


def test_a_template_error_fails_the_delivery_before_anything_is_sent(db, clock, smtp, monkeypatch):
    email_channel(db, clock, smtp)
    open_alert(db, clock.now())
    render = jinja2.Template.render

    def broken(self, *args, **kwargs):
        if self.name == "email.html.j2":
            raise jinja2.UndefinedError("'m' has no attribute 'gone'")
        return render(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Template, "render", broken)
    Notifier(db, "n1", {"email": EmailTransport(timeout=5)}, base_backoff=30).run_once(clock.now())

    assert smtp.messages == []
    [row] = outbox(db)
    assert row["status"] == "failed" and "UndefinedError" in row["last_error"]
