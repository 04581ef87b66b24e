"""Tenant channels reach only public addresses, unless the platform allows a range."""

import contextlib
import ipaddress
import socket

import httpx
import pytest

from tests.integration.fake_servers import SlackFake, WebhookFake
from tests.integration.notify_builders import (
    add_channel,
    channel_row,
    open_alert,
    outbox,
)
from tickwarden import outbound
from tickwarden.notifier import Notifier
from tickwarden.transports.slack import SlackTransport
from tickwarden.transports.webhook import WebhookTransport


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/hook",
    "http://localhost/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.1.2.3/hook",
    "http://192.168.0.10/hook",
    "http://100.64.0.1/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[fd00:ec2::254]/latest",
    "http://0.0.0.0/hook",
])
def test_it_refuses_internal_destinations_after_resolution(url):
    with pytest.raises(outbound.OutboundRefused, match="tenant channels may not reach"):
        outbound.check_url(url, {})


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://example.com/x", "http:// or https://"),
    ("http://user:pw@example.com/x", "must not carry credentials"),
    ("http://no-such-host.invalid/x", "does not resolve"),
])
def test_it_refuses_other_schemes_credentials_and_unresolvable_hosts(url, message):
    with pytest.raises(outbound.OutboundRefused, match=message):
        outbound.check_url(url, {})


def test_public_addresses_pass_and_allowed_ranges_open_private_ones():
    outbound.check_address(ipaddress.ip_address("93.184.216.34"), [])
    outbound.check_url("http://127.0.0.1:9/x", {"TICKWARDEN_ALLOW_PRIVATE_URLS": "127.0.0.0/8"})
    with pytest.raises(outbound.OutboundRefused):
        outbound.check_url("http://10.0.0.1/x", {"TICKWARDEN_ALLOW_PRIVATE_URLS": "127.0.0.0/8"})
    with pytest.raises(outbound.OutboundRefused, match="not a CIDR range"):
        outbound.allowed_ranges({"TICKWARDEN_ALLOW_PRIVATE_URLS": "127.0.0.0/8, nonsense"})


def test_the_guarded_client_checks_the_address_it_connects_to(monkeypatch):
    # What a rebinding name does: resolve to a public address first, loopback at connect time.
    hook = WebhookFake().start()
    try:
        with outbound.guarded_client(5, {}) as client, pytest.raises(outbound.OutboundRefused):
            client.post(hook.url, content=b"{}")
        assert hook.requests == []
    finally:
        hook.stop()


@pytest.fixture
def hook():
    server = WebhookFake().start()
    yield server
    server.stop()


def deliver(db, clock, url, tenant):
    add_channel(db, clock.now(), tenant=tenant, name="hook", kind="webhook",
                audience="customer" if tenant else "engineering", config={"url": url})
    open_alert(db, clock.now(), tenant=tenant or "acme", owner="customer" if tenant else "engineering")
    Notifier(db, "n1", {"webhook": WebhookTransport(timeout=5)}).run_once(clock.now())


def test_a_tenant_webhook_to_loopback_is_refused_permanently(db, clock, hook, monkeypatch):
    monkeypatch.setenv("TICKWARDEN_ALLOW_PRIVATE_URLS", "")
    deliver(db, clock, hook.url, "beta")
    assert hook.requests == []
    (row,) = outbox(db)
    assert row["status"] == "dead" and "may not reach" in (row["last_error"] or "")


def test_a_tenant_webhook_to_an_allowed_range_is_delivered(db, clock, hook, monkeypatch):
    monkeypatch.setenv("TICKWARDEN_ALLOW_PRIVATE_URLS", "127.0.0.0/8")
    deliver(db, clock, hook.url, "beta")
    assert len(hook.requests) == 1 and outbox(db)[0]["status"] == "sent"


def test_a_platform_webhook_is_the_platforms_choice(db, clock, hook, monkeypatch):
    monkeypatch.setenv("TICKWARDEN_ALLOW_PRIVATE_URLS", "")
    deliver(db, clock, hook.url, None)
    assert len(hook.requests) == 1


@contextlib.contextmanager
def redirecting(status, path):
    """A server that answers every request with `status` to `path` on a second one: (the first, the second)."""
    target = WebhookFake().start()

    class Redirecting(WebhookFake):
        def answer(self, request):
            return status, {"Location": target.url + path}, b""

    first = Redirecting().start()
    try:
        yield first, target
    finally:
        first.stop()
        target.stop()


def test_redirects_are_never_followed(db, clock, monkeypatch):
    monkeypatch.setenv("TICKWARDEN_ALLOW_PRIVATE_URLS", "127.0.0.0/8")
    with redirecting(307, "/internal") as (first, target):
        deliver(db, clock, first.url, "beta")
        assert len(first.requests) == 1 and target.requests == []
        assert outbox(db)[0]["status"] != "sent"


def deliver_to_slack(db, clock, base_url, monkeypatch):
    monkeypatch.setenv("TW_TEST_SLACK_TOKEN", "xoxb-outbound-test")
    channel = add_channel(db, clock.now(), tenant="beta", name="alerts", kind="slack", audience="customer",
                          config={"channel": "C0BETA", "base_url": base_url}, secret_ref="env:TW_TEST_SLACK_TOKEN")
    open_alert(db, clock.now(), tenant="beta", owner="customer")
    Notifier(db, "n1", {"slack": SlackTransport(timeout=2)}).run_once(clock.now())
    return channel


def test_a_tenant_slack_base_url_is_never_redirected(db, clock, monkeypatch):
    # slack_sdk's own urllib opener follows a 302 (as a GET) wherever it points.
    monkeypatch.setenv("TICKWARDEN_ALLOW_PRIVATE_URLS", "127.0.0.0/8")
    with redirecting(302, "/latest/meta-data/") as (first, target):
        deliver_to_slack(db, clock, first.url + "/api/", monkeypatch)
        assert len(first.requests) == 1 and target.requests == []
        assert outbox(db)[0]["status"] != "sent"


def test_a_tenant_slack_base_url_is_checked_at_connect_time(db, clock, monkeypatch):
    # DNS rebinding: an allowed address for the check, a private one when the client connects.
    monkeypatch.setenv("TICKWARDEN_ALLOW_PRIVATE_URLS", "127.0.0.0/8")
    slack = SlackFake(token="xoxb-outbound-test").start()
    answers = iter(["127.0.0.1"])
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host != "slack.rebind.test":
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers, "10.0.0.1"), port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    try:
        channel = deliver_to_slack(db, clock, f"http://slack.rebind.test:{slack.port}/api/", monkeypatch)
        row = channel_row(db, channel.id)
        assert slack.posts == [] and not row["enabled"] and "may not reach" in row["disabled_reason"]
    finally:
        slack.stop()


def test_slack_sdk_still_sends_through_the_guarded_seam():
    # The guard replaces slack_sdk's urllib call at one method; if slack_sdk renames it, fail loudly.
    from slack_sdk.web.base_client import BaseClient

    from tickwarden.transports.slack import _GuardedWebClient

    assert "_perform_urllib_http_request_internal" in vars(BaseClient)
    assert "_perform_urllib_http_request_internal" in vars(_GuardedWebClient)


def test_httpx_is_still_the_client_underneath():
    # The guard sits in httpcore's network backend; if httpx stops handing it over, fail loudly.
    with outbound.guarded_client(5, {}) as client:
        assert isinstance(client, httpx.Client)
        assert isinstance(client._transport._pool._network_backend, outbound._GuardedBackend)


def test_a_tenant_webhook_is_signed_with_the_tenants_own_secret(db, clock, hook, monkeypatch):
    from tickwarden import secrets
    from tickwarden.transports.webhook import verify

    monkeypatch.setenv("TICKWARDEN_SECRET_KEY", "channel-test-key")
    channel = add_channel(db, clock.now(), tenant="beta", name="hook", kind="webhook", audience="customer",
                          config={"url": hook.url}, secret_ref="secret:HOOK_KEY")
    with db.transaction() as store:
        secrets.set_secret(store, secrets.Keyring("channel-test-key"), channel.tenant_id, "HOOK_KEY", "whsec-beta",
                           clock.now())
    open_alert(db, clock.now(), tenant="beta", owner="customer")
    Notifier(db, "n1", {"webhook": WebhookTransport(timeout=5)}).run_once(clock.now())
    (request,) = hook.requests
    assert verify("whsec-beta", request.body, request.headers["x-tickwarden-signature"])


def test_a_tenant_channel_whose_secret_is_missing_is_disabled_with_one_sentence(db, clock, hook, monkeypatch):
    monkeypatch.setenv("TICKWARDEN_SECRET_KEY", "channel-test-key")
    channel = add_channel(db, clock.now(), tenant="beta", name="hook", kind="webhook", audience="customer",
                          config={"url": hook.url}, secret_ref="secret:HOOK_KEY")
    open_alert(db, clock.now(), tenant="beta", owner="customer")
    Notifier(db, "n1", {"webhook": WebhookTransport(timeout=5)}).run_once(clock.now())
    assert hook.requests == []
    row = channel_row(db, channel.id)
    assert row["enabled"] is False and "no secret named HOOK_KEY" in row["disabled_reason"]
