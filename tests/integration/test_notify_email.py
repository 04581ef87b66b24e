import pytest

from tests.integration.fake_servers import SMTPFake
from tests.integration.notify_builders import add_channel, add_event, channel_row, open_alert, outbox
from tickwarden.notifier import Notifier
from tickwarden.transports.email import EmailTransport


@pytest.fixture
def smtp():
    server = SMTPFake().start()
    yield server
    server.stop()


def email_channel(db, clock, port, tenant="acme", name="mail"):
    return add_channel(db, clock.now(), tenant=tenant, name=name, kind="email", audience="customer",
                       config={"host": "127.0.0.1", "port": port, "from": "alerts@tickwarden.example",
                               "to": ["oncall@acme.example", "data@acme.example"]})


def notifier(db):
    return Notifier(db, "n1", {"email": EmailTransport(timeout=5)}, base_backoff=30)


def test_mails_of_one_alert_share_a_subject_and_thread_by_message_id(db, clock, smtp):
    email_channel(db, clock, smtp.port)
    alert = open_alert(db, clock.now())
    n = notifier(db)
    n.run_once(clock.now())
    add_event(db, alert, "escalated", clock.advance(600))
    add_event(db, alert, "reassigned", clock.advance(60), note="customer credentials expired", actor="ops")
    add_event(db, alert, "resolved", clock.advance(3600))
    n.run_once(clock.now())

    mails = smtp.messages
    assert len(mails) == 4
    assert [m["Subject"] for m in mails] == [
        "[WARNING] opened: acme/nightly-pipeline (alert #1)", "[CRITICAL] escalated: acme/nightly-pipeline (alert #1)",
        "[CRITICAL] reassigned: acme/nightly-pipeline (alert #1)",
        "[CRITICAL] resolved: acme/nightly-pipeline (alert #1)"]
    assert {m["Auto-Submitted"] for m in mails} == {"auto-generated"}
    root = mails[0]["Message-ID"]
    assert root.startswith("<tickwarden.alert-1.event-") and mails[0]["In-Reply-To"] is None
    for reply in mails[1:]:
        assert reply["In-Reply-To"] == root and reply["References"] == root
        assert reply["Message-ID"] != root
    assert len({m["Message-ID"] for m in mails}) == 4
    assert smtp.collector.envelopes[0] == ("alerts@tickwarden.example", ["oncall@acme.example", "data@acme.example"])
    assert {m.get_content_type() for m in mails} == {"multipart/alternative"}
    bodies = [m.get_body(preferencelist=("plain",)).get_content() for m in mails]
    htmls = [m.get_body(preferencelist=("html",)).get_content() for m in mails]
    assert "WARNING alert opened" in htmls[0] and "<pre" in htmls[0] and "Downtime" in htmls[3]
    assert "WARNING alert opened" in bodies[0] and "Log tail of the failing step" in bodies[0]
    assert "Escalated to CRITICAL" in bodies[1]
    assert "Reassigned to customer" in bodies[2] and "customer credentials expired" in bodies[2]
    assert "Resolved" in bodies[3] and "Downtime:       1h 11m" in bodies[3]
    with db.connection() as conn:
        assert conn.execute("SELECT thread_key FROM notification_threads").fetchone()[0] == root


def test_an_unreachable_smtp_server_is_retried_and_threads_after_recovery(db, clock, smtp):
    email_channel(db, clock, smtp.port)
    alert = open_alert(db, clock.now())
    n = notifier(db)
    n.run_once(clock.now())
    smtp.stop()
    add_event(db, alert, "resolved", clock.advance(600))
    n.run_once(clock.now())
    row = outbox(db)[-1]
    assert row["status"] == "failed" and "unreachable" in row["last_error"]
    smtp.start()
    clock.set(row["next_attempt_at"])
    n.run_once(clock.now())
    assert len(smtp.messages) == 2 and smtp.messages[1]["In-Reply-To"] == smtp.messages[0]["Message-ID"]
    assert [r["status"] for r in outbox(db)] == ["sent", "sent"]


def test_a_refused_mail_is_permanent_and_disables_the_channel(db, clock, smtp):
    channel = email_channel(db, clock, smtp.port)
    smtp.collector.reject_with = "554 5.7.1 relaying denied"
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    row = channel_row(db, channel.id)
    assert not row["enabled"] and "554" in row["disabled_reason"]
    assert outbox(db)[0]["status"] == "dead"


def test_it_logs_in_with_the_password_from_the_secret_reference(db, clock, monkeypatch):
    monkeypatch.setenv("TW_TEST_SMTP_PASSWORD", "s3cret-smtp")
    server = SMTPFake(login=("tickwarden", "s3cret-smtp")).start()
    try:
        add_channel(db, clock.now(), tenant="acme", name="mail", kind="email", audience="customer",
                    config={"host": "127.0.0.1", "port": server.port, "from": "tw@ops.example",
                            "to": "oncall@acme.example", "username": "tickwarden"},
                    secret_ref="env:TW_TEST_SMTP_PASSWORD")
        open_alert(db, clock.now())
        notifier(db).run_once(clock.now())
        assert server.logins == ["tickwarden"] and len(server.messages) == 1
        assert "s3cret-smtp" not in server.messages[0].as_string()
    finally:
        server.stop()


def test_a_wrong_password_disables_the_channel(db, clock, monkeypatch):
    monkeypatch.setenv("TW_TEST_SMTP_PASSWORD", "wrong")
    server = SMTPFake(login=("tickwarden", "s3cret-smtp")).start()
    try:
        channel = add_channel(db, clock.now(), tenant="acme", name="mail", kind="email", audience="customer",
                              config={"host": "127.0.0.1", "port": server.port, "from": "tw@ops.example",
                                      "to": "oncall@acme.example", "username": "tickwarden"},
                              secret_ref="env:TW_TEST_SMTP_PASSWORD")
        open_alert(db, clock.now())
        notifier(db).run_once(clock.now())
        row = channel_row(db, channel.id)
        assert not row["enabled"] and "refused the login" in row["disabled_reason"] and server.messages == []
    finally:
        server.stop()


def test_the_html_part_escapes_what_a_failure_wrote(db, clock, smtp):
    email_channel(db, clock, smtp.port)
    open_alert(db, clock.now(), workflow="nightly-pipeline", error="bad <script>alert(1)</script> & <b>x</b>",
               log_tail="<img src=x onerror=alert(2)>")
    notifier(db).run_once(clock.now())
    [mail] = smtp.messages
    html = mail.get_body(preferencelist=("html",)).get_content()
    assert "<script>" not in html and "<img" not in html and "<b>x" not in html
    assert "&lt;script&gt;" in html and "&lt;img" in html
    plain = mail.get_body(preferencelist=("plain",)).get_content()
    assert "<script>" in plain  # the text part is text: nothing to escape
