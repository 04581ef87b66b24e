import contextlib
import socket

import pytest

from tests.integration.fake_servers import SMTPFake, self_signed
from tests.integration.notify_builders import add_channel, add_event, channel_row, open_alert, outbox
from tickwarden.notifier import Notifier
from tickwarden.transports.email import EmailTransport


@pytest.fixture
def smtp():
    server = SMTPFake().start()
    yield server
    server.stop()


def email_channel(db, clock, port, tenant="acme", name="mail", **tls):
    return add_channel(db, clock.now(), tenant=tenant, name=name, kind="email", audience="customer",
                       config={"host": "127.0.0.1", "port": port, "from": "alerts@tickwarden.example",
                               "to": ["oncall@acme.example", "data@acme.example"], **tls})


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


@pytest.fixture
def certificate(tmp_path):
    return self_signed(tmp_path)


@contextlib.contextmanager
def login_server(monkeypatch, password, certificate=None, *, trusted=True):
    """An SMTP server that wants tickwarden/s3cret-smtp; the channel's secret holds `password`.

    With `certificate` it speaks STARTTLS, and `trusted` says whether the client trusts it.
    """
    monkeypatch.setenv("TW_TEST_SMTP_PASSWORD", password)
    if certificate is not None and trusted:
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))  # the server's certificate is the one trusted
    else:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    server = SMTPFake(login=("tickwarden", "s3cret-smtp"), certificate=certificate).start()
    try:
        yield server
    finally:
        server.stop()


def send_one(db, clock, port, **tls):
    """Open an alert, deliver it through a channel that logs in, and return the channel's row."""
    channel = add_channel(db, clock.now(), tenant="acme", name="mail", kind="email", audience="customer",
                          config={"host": "127.0.0.1", "port": port, "from": "tw@ops.example",
                                  "to": "oncall@acme.example", "username": "tickwarden", **tls},
                          secret_ref="env:TW_TEST_SMTP_PASSWORD")
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    return channel_row(db, channel.id)


def test_it_logs_in_over_verified_tls_with_the_password_from_the_secret_reference(db, clock, monkeypatch,
                                                                                   certificate):
    with login_server(monkeypatch, "s3cret-smtp", certificate) as server:
        send_one(db, clock, server.port, starttls=True)
        assert server.logins == ["tickwarden"] and len(server.messages) == 1
        assert "s3cret-smtp" not in server.messages[0].as_string()


def test_a_wrong_password_disables_the_channel(db, clock, monkeypatch, certificate):
    with login_server(monkeypatch, "wrong", certificate) as server:
        row = send_one(db, clock, server.port, starttls=True)
        assert not row["enabled"] and "refused the login" in row["disabled_reason"] and server.messages == []


def test_an_ssl_channel_delivers_over_tls_verified_from_the_first_byte(db, clock, monkeypatch, certificate):
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    server = SMTPFake(certificate=certificate, tls="ssl").start()
    try:
        email_channel(db, clock, server.port, ssl=True)
        open_alert(db, clock.now())
        notifier(db).run_once(clock.now())
        assert len(server.messages) == 1
    finally:
        server.stop()


@pytest.mark.parametrize("tls", ["starttls", "ssl"])
def test_an_untrusted_certificate_disables_the_channel_and_sends_nothing(db, clock, monkeypatch, certificate, tls):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    server = SMTPFake(certificate=certificate, tls=tls).start()
    try:
        channel = email_channel(db, clock, server.port, **{tls: True})
        open_alert(db, clock.now())
        notifier(db).run_once(clock.now())
        row = channel_row(db, channel.id)
        assert server.messages == []
        assert not row["enabled"] and "certificate was not trusted" in row["disabled_reason"]
    finally:
        server.stop()


def test_a_server_whose_certificate_is_not_trusted_never_sees_the_password(db, clock, monkeypatch, certificate):
    # A man in the middle answers STARTTLS with a certificate of its own: smtplib's default
    # context would accept it and hand over the password.
    with login_server(monkeypatch, "s3cret-smtp", certificate, trusted=False) as server:
        row = send_one(db, clock, server.port, starttls=True)
        assert server.logins == [] and server.messages == []
        assert not row["enabled"] and "certificate was not trusted" in row["disabled_reason"]
        assert "s3cret" not in row["disabled_reason"]


def test_a_channel_that_would_log_in_without_tls_sends_nothing(db, clock, monkeypatch):
    # A row written before the configuration check (or by hand) still never sends the password in the clear.
    with login_server(monkeypatch, "s3cret-smtp") as server:
        row = send_one(db, clock, server.port)
        assert server.logins == [] and server.messages == []
        assert not row["enabled"] and "needs 'starttls' or 'ssl'" in row["disabled_reason"]


def test_a_tenant_smtp_host_is_resolved_once_and_reached_at_the_address_checked(db, clock, smtp, monkeypatch):
    # DNS rebinding: the name answers an allowed address to the check and another one after it.
    # The mail must go to the checked address; a second lookup would connect elsewhere (refused).
    answers = iter(["127.0.0.1", "127.0.0.2"])
    lookups = []
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host != "mail.rebind.test":
            return real(host, port, *args, **kwargs)
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    add_channel(db, clock.now(), tenant="acme", name="mail", kind="email", audience="customer",
                config={"host": "mail.rebind.test", "port": smtp.port, "from": "tw@ops.example",
                        "to": "oncall@acme.example"})
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    assert lookups == ["mail.rebind.test"] and len(smtp.messages) == 1


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
