"""Nothing secret leaves in a notification: canary values planted everywhere a secret
or a customer value could hide must not appear in any delivered body or header."""

import pytest

from tests.integration.fake_servers import SlackFake, SMTPFake, WebhookFake
from tests.integration.notify_builders import add_channel, add_event, open_alert
from tickwarden.notifier import Notifier
from tickwarden.transports.email import EmailTransport
from tickwarden.transports.slack import SlackTransport
from tickwarden.transports.webhook import WebhookTransport

SLACK_TOKEN = "xoxb-CANARY-slack-token-0001"
HOOK_SECRET = "CANARY-hook-secret-0002"
ERROR = ("could not connect: password=CANARY-pw-0003 while loading 'CANARY 0004 EUR' "
         "from postgres://loader:CANARY-pw-0005@db.internal/sales")
LOG_TAIL = "\n".join([
    "step load_orders started",
    "Authorization: Bearer CANARY-bearer-0006",
    "api_key=CANARY-key-0007",
    "inserting row ('CANARY 0008 alice', 42.50)",
    "token: CANARY-token-0009",
    "customer email CANARY0010@acme.example failed validation",
    "ERROR: duplicate key",
])
OUTPUTS = {"rows": [{"name": "CANARY-output-0011"}], "api": "CANARY-output-0012"}
NOTE = "rotated the secret=CANARY-note-0013 for 'CANARY 0014 customer'"


@pytest.fixture
def servers(monkeypatch):
    monkeypatch.setenv("TW_CANARY_SLACK", SLACK_TOKEN)
    monkeypatch.setenv("TW_CANARY_HOOK", HOOK_SECRET)
    slack, hook, smtp = SlackFake(token=SLACK_TOKEN).start(), WebhookFake().start(), SMTPFake().start()
    yield slack, hook, smtp
    slack.stop()
    hook.stop()
    smtp.stop()


def test_no_canary_reaches_any_transport(db, clock, servers):
    slack, hook, smtp = servers
    now = clock.now()
    add_channel(db, now, tenant="acme", name="slack", kind="slack", audience="customer",
                config={"channel": "C1", "base_url": slack.base_url}, secret_ref="env:TW_CANARY_SLACK")
    add_channel(db, now, tenant=None, name="hook", kind="webhook", audience="engineering",
                config={"url": hook.url}, secret_ref="env:TW_CANARY_HOOK")
    add_channel(db, now, tenant="acme", name="mail", kind="email", audience="customer",
                config={"host": "127.0.0.1", "port": smtp.port, "from": "tw@ops.example", "to": "oncall@ops.example"})
    alert = open_alert(db, now, error=ERROR, log_tail=LOG_TAIL, outputs=OUTPUTS)
    with db.connection() as conn:  # a step's own output row carries customer data too
        conn.execute("""INSERT INTO attempt_steps (attempt_id, run_scheduled_for, tenant_id, step, position, status, log,
                                                   output, error)
                        SELECT id, run_scheduled_for, tenant_id, 'load_orders', 0, 'failed', %s, '{"v": "CANARY-step-0015"}', %s
                          FROM attempts""", (LOG_TAIL, ERROR))
    add_event(db, alert, "escalated", clock.advance(60))
    add_event(db, alert, "reassigned", clock.advance(60), note=NOTE, actor="ops")
    add_event(db, alert, "resolved", clock.advance(60))
    transports = {"slack": SlackTransport(timeout=5), "webhook": WebhookTransport(timeout=5),
                  "email": EmailTransport(timeout=5)}
    Notifier(db, "n1", transports).run_once(clock.now())

    assert len(slack.posts) == 4 and len(hook.requests) == 4 and len(smtp.messages) == 4
    delivered = []
    for request in slack.requests + hook.requests:
        delivered.append(request.body.decode())
        delivered += [f"{k}: {v}" for k, v in request.headers.items()
                      if k not in ("authorization", "x-tickwarden-signature")]
    for mail in smtp.messages:
        delivered.append(mail.as_string())
    text = "\n".join(delivered)
    assert "CANARY" not in text, [line for line in text.splitlines() if "CANARY" in line][:5]
    # the message is still useful: identifiers and the shape of the failure survive
    assert "duplicate key" in text and "load_orders" in text and "could not connect" in text
    assert "[redacted]" in text and "[value]" in text
    # the Slack token travels only where Slack needs it, the signing key never at all
    assert all(r.headers["authorization"] == f"Bearer {SLACK_TOKEN}" for r in slack.requests)
    assert all(HOOK_SECRET not in r.headers["x-tickwarden-signature"] for r in hook.requests)
