import base64
import json

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.integration.fake_servers import WebhookFake, free_port
from tests.integration.notify_builders import add_channel, add_event, channel_row, open_alert, outbox
from tickwarden.clock import WallClock
from tickwarden.notifier import Notifier
from tickwarden.transports.webhook import verify
from tickwarden.transports.webhook import WebhookTransport

SECRET = "whsec-test-signing-key"


@pytest.fixture
def hook(monkeypatch):
    monkeypatch.setenv("TW_TEST_HOOK_SECRET", SECRET)
    server = WebhookFake().start()
    yield server
    server.stop()


def hook_channel(db, clock, url):
    return add_channel(db, clock.now(), tenant=None, name="platform-hook", kind="webhook", audience="engineering",
                       config={"url": url + "/hooks/tickwarden"}, secret_ref="env:TW_TEST_HOOK_SECRET")


def notifier(db):
    return Notifier(db, "n1", {"webhook": WebhookTransport(timeout=5)}, base_backoff=30)


def test_webhooks_are_signed_json_with_a_stable_idempotency_key(db, clock, hook):
    hook_channel(db, clock, hook.url)
    opened_at = clock.now()
    alert = open_alert(db, opened_at)
    n = notifier(db)
    hook.status = 503
    n.run_once(clock.now())
    hook.status = 200
    clock.set(outbox(db)[0]["next_attempt_at"])
    n.run_once(clock.now())
    add_event(db, alert, "resolved", clock.advance(60))
    n.run_once(clock.now())

    first_try, retry, resolved = hook.requests
    for request in hook.requests:
        assert verify(SECRET, request.body, request.headers["x-tickwarden-signature"])
        assert request.headers["content-type"] == "application/json"
        assert request.headers["x-tickwarden-timestamp"].isdigit()
    assert first_try.headers["idempotency-key"] == retry.headers["idempotency-key"]
    assert resolved.headers["idempotency-key"] != retry.headers["idempotency-key"]
    body = json.loads(retry.body)
    assert body["event"] == "opened" and body["tenant"] == "acme" and body["workflow"] == "nightly-pipeline"
    assert body["alert"]["id"] == alert and body["alert"]["link"] == f"/alerts/{alert}"
    assert body["thread"] == json.loads(resolved.body)["thread"]
    assert json.loads(resolved.body)["alert"]["downtime_seconds"] == round((clock.now() - opened_at).total_seconds())
    assert [r["status"] for r in outbox(db)] == ["sent", "sent"]


def test_a_tampered_body_does_not_verify(db, clock, hook):
    hook_channel(db, clock, hook.url)
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    [request] = hook.requests
    assert not verify(SECRET, request.body.replace(b"acme", b"evil"), request.headers["x-tickwarden-signature"])
    assert not verify("another-secret", request.body, request.headers["x-tickwarden-signature"])


def test_a_refused_connection_is_retried_until_the_receiver_is_up(db, clock, hook):
    port = free_port()
    hook_channel(db, clock, f"http://127.0.0.1:{port}")
    open_alert(db, clock.now())
    n = notifier(db)
    n.run_once(clock.now())
    row = outbox(db)[0]
    assert row["status"] == "failed" and row["tries"] == 1
    late = WebhookFake(port=port).start()
    try:
        clock.set(row["next_attempt_at"])
        n.run_once(clock.now())
        assert len(late.requests) == 1 and outbox(db)[0]["status"] == "sent"
    finally:
        late.stop()


@pytest.mark.parametrize("status,permanent", [(400, True), (404, True), (410, True), (408, False), (429, False),
                                              (500, False)])
def test_client_errors_are_permanent_except_timeout_and_rate_limit(db, clock, hook, status, permanent):
    channel = hook_channel(db, clock, hook.url)
    hook.status = status
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    assert channel_row(db, channel.id)["enabled"] is not permanent
    assert outbox(db)[0]["status"] == ("dead" if permanent else "failed")


STANDARD_SECRET = "whsec_" + base64.b64encode(b"a-32-byte-key-for-standard-hooks").decode()


@pytest.mark.parametrize("secret,receiver_key", [(STANDARD_SECRET, STANDARD_SECRET),
                                                 (SECRET, SECRET.encode())])
def test_webhooks_verify_with_a_standard_webhooks_library(db, clock, hook, monkeypatch, secret, receiver_key):
    monkeypatch.setenv("TW_TEST_HOOK_SECRET", secret)
    clock.set(WallClock().now())  # the receiver's library checks the timestamp against its own clock
    hook_channel(db, clock, hook.url)
    open_alert(db, clock.now())
    n = notifier(db)
    hook.status = 500
    n.run_once(clock.now())
    hook.status = 200
    clock.set(outbox(db)[0]["next_attempt_at"])
    n.run_once(clock.now())
    first, retry = hook.requests
    receiver = Webhook(receiver_key)
    for request in (first, retry):
        body = receiver.verify(request.body, request.headers)
        assert body["event"] == "opened"
    assert first.headers["webhook-id"] == retry.headers["webhook-id"] == first.headers["idempotency-key"]
    assert first.headers["webhook-timestamp"] != retry.headers["webhook-timestamp"]
    with pytest.raises(WebhookVerificationError):
        receiver.verify(retry.body.replace(b"opened", b"resolved"), retry.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(b"another-key").verify(retry.body, retry.headers)


def test_webhook_times_are_iso_8601_in_utc(db, clock, hook):
    hook_channel(db, clock, hook.url)
    open_alert(db, clock.now())
    notifier(db).run_once(clock.now())
    body = json.loads(hook.requests[0].body)
    assert body["sent_at"] == clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    assert body["at"].endswith("Z") and body["alert"]["opened_at"].endswith("Z")
