"""Hostile workflow files and API bodies: one clear sentence, nothing written."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import psycopg
import pytest

from tests.helpers import catalog_counts
from tests.apiutil import api, live_server, make_token, seed_tenant
from tests.dbutil import TEST_URL, drop_schema, make_schema
from tests.integration.test_apply import GOOD, NOW, write
from tickwarden import catalog
from tickwarden.clock import VirtualClock
from tickwarden.db import Database
from tickwarden.errors import InvalidInput
from tickwarden.migrate import upgrade

DEEP = "[" * 3000 + "]" * 3000
EMAIL = 'kind: email, config: {host: smtp.platform.test, from: tickwarden@platform.test, to: ["oncall@platform.test"]}'
SLACK = 'kind: slack, audience: customer, config: {channel: "#alerts"}, secret_ref: "secret:SLACK_TOKEN"}'

FILES = {
    "huge description": (("monitoring: false", "monitoring: false\n    description: " + "x" * 10_000_000),
                         "fleet.yaml: the file is larger than 1024 KiB."),
    "long description": (("monitoring: false", "monitoring: false\n    description: " + "x" * 2001),
                         "fleet.yaml: workflows[1].description: string should have at most 2000 characters."),
    "nul in a value": (("{count: 3}", '{count: 3, note: "a\\0b"}'),
                       "fleet.yaml: workflows[0].steps[0].params.note: the text contains a NUL character."),
    "nul in a key": (("{count: 3}", '{count: 3, "a\\0b": 1}'),
                     "fleet.yaml: workflows[0].steps[0].params: a key contains a NUL character."),
    "lone surrogate": (("display_name: Acme Corp", 'display_name: "Acme \\ud800"'),
                       "fleet.yaml: tenants[0].display_name: the text contains a lone surrogate"),
    "deep nesting": (("{count: 3}", "{count: " + DEEP + "}"), "fleet.yaml: the file nests deeper than 32 levels."),
    "moderate nesting": (("{count: 3}", "{count: " + "[" * 40 + "]" * 40 + "}"),
                         "fleet.yaml: workflows[0].steps[0].params.count"),
    "boolean timeout": (("monitoring: false", "monitoring: false\n    timeout_seconds: true"),
                        "fleet.yaml: workflows[1].timeout_seconds: input should be a valid integer."),
    "webhook without url": ((EMAIL, "kind: webhook, config: {}"),
                            "fleet.yaml: platform_channels[0].config.url: a webhook channel needs 'url'"),
    "webhook to a file": ((EMAIL, "kind: webhook, config: {url: \"file:///etc/passwd\"}"),
                          "fleet.yaml: platform_channels[0].config.url: not an http or https address with a host"),
    "email login in the clear": ((EMAIL, EMAIL.replace("}", ", username: ops}")),
                                 "fleet.yaml: platform_channels[0].config.username: an email channel that logs in "
                                 "needs 'starttls' or 'ssl'"),
    "email with nowhere to send": ((EMAIL, EMAIL.replace("host: smtp.platform.test, ", "")),
                                   "fleet.yaml: platform_channels[0].config.host: an email channel needs 'host'"),
    "email to nobody": ((EMAIL, EMAIL.replace('to: ["oncall@platform.test"]', "to: []")),
                        "fleet.yaml: platform_channels[0].config.to: an email channel needs 'to'"),
    "email from no address": ((EMAIL, EMAIL.replace("from: tickwarden@platform.test", "from: tickwarden")),
                              "fleet.yaml: platform_channels[0].config.from: an email channel needs 'from'"),
    "smtp port not a number": ((EMAIL, EMAIL.replace("}", ', port: "25; /etc/passwd"}')),
                               "fleet.yaml: platform_channels[0].config.port: an SMTP port is a whole number"),
    "slack without a token": ((SLACK, SLACK.replace(', secret_ref: "secret:SLACK_TOKEN"', "")),
                              "fleet.yaml: channels[0].secret_ref: a slack channel needs 'secret_ref' for its Slack token"),
    "slack without a conversation": ((SLACK, SLACK.replace('{channel: "#alerts"}', "{}")),
                                     "fleet.yaml: channels[0].config.channel: a slack channel needs 'channel'"),
    "pagerduty without a key": ((EMAIL, "kind: pagerduty, config: {}"),
                                "fleet.yaml: platform_channels[0].secret_ref: a pagerduty channel needs 'secret_ref'"),
    "never fires": (('"*/5 * * * *"', '"0 0 31 2 *"'),
                    "fleet.yaml: workflows[1].schedule.cron: cron expression '0 0 31 2 *' never fires"),
}


@pytest.mark.parametrize("case", sorted(FILES))
def test_it_refuses_a_hostile_workflow_file_in_one_sentence(db, tmp_path, case):
    (old, new), expected = FILES[case]
    assert old in GOOD, case
    with pytest.raises(InvalidInput) as raised:
        catalog.apply_file(db, write(tmp_path, GOOD.replace(old, new, 1)), NOW)
    message = raised.value.message
    assert message.startswith(expected), message
    assert "\n" not in message and message.endswith(".") and len(message) < 300
    assert "passwd" not in message
    with db.transaction() as store:
        assert set(catalog_counts(store).values()) == {0}


def test_a_webhook_channel_with_an_https_url_applies(db, tmp_path):
    text = GOOD.replace(EMAIL, 'kind: webhook, config: {url: "https://hooks.example.test/x"}')
    catalog.apply_file(db, write(tmp_path, text), NOW)


@pytest.mark.parametrize("tls", ["starttls", "ssl"])
def test_an_email_channel_that_logs_in_over_tls_applies(db, tmp_path, tls):
    text = GOOD.replace(EMAIL, EMAIL.replace("}", f", username: ops, {tls}: true}}"))
    catalog.apply_file(db, write(tmp_path, text), NOW)
    with db.transaction() as store:
        (channel,) = [b.channel for b in store.outbox.list_notification_channels() if b.channel.kind == "email"]
    assert channel.config["username"] == "ops" and channel.config[tls] is True


@pytest.fixture(scope="module")
def server():
    name = make_schema("bounds")
    with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
        upgrade(conn, datetime(2026, 1, 1, tzinfo=UTC))
    db = Database(TEST_URL, schema=name, min_size=1, max_size=4)
    clock = VirtualClock(datetime(2026, 11, 30, 9, 0, tzinfo=UTC))
    acme = seed_tenant(db, clock.now(), "acme")
    acme.token = make_token(db, clock.now(), tenant="acme", name="alice")
    try:
        with live_server(db, clock) as base:
            yield base, db, acme
    finally:
        db.close()
        drop_schema(name)


PUBLISH = {"environment": "default", "publisher": "ops@acme.test", "schedule": {"cron": "0 2 * * *"},
           "steps": [{"name": "a", "kind": "python", "call": "m:f"}]}


def _with_params(value: str) -> bytes:
    body = {**PUBLISH, "steps": [{"name": "a", "kind": "python", "call": "m:f", "params": {"k": "@"}}]}
    return json.dumps(body).replace('"@"', value).encode()


BODIES = {
    "surrogate in a note": ("post", "/api/alerts/{alert}/notes", b'{"note": "x\\ud800"}', 422, "lone surrogate"),
    "surrogate in a description": ("put", "/api/tenants/acme/workflows/new",
                                   json.dumps({**PUBLISH, "description": "\ud800"}).encode(), 422, "lone surrogate"),
    "nul in a key": ("put", "/api/tenants/acme/workflows/new", _with_params('{"a\\u0000": 1}'), 422, "NUL"),
    "deep nesting": ("put", "/api/tenants/acme/workflows/new", _with_params(DEEP), 400, "parsing the body"),
    "moderate nesting": ("put", "/api/tenants/acme/workflows/new", _with_params("[" * 40 + "]" * 40), 422,
                         "nested deeper than 32 levels"),
    "boolean timeout": ("put", "/api/tenants/acme/workflows/new",
                        json.dumps({**PUBLISH, "timeout_seconds": True}).encode(), 422, "timeout_seconds"),
    "never fires": ("put", "/api/tenants/acme/workflows/new", json.dumps({**PUBLISH, "schedule": {"cron": "0 0 31 2 *"}}).encode(),
                    422, "never fires"),
}


@pytest.mark.parametrize("case", sorted(BODIES))
def test_it_refuses_a_hostile_api_body_with_a_4xx_sentence(server, case):
    base, db, acme = server
    method, path, body, status, contains = BODIES[case]
    with db.connection() as conn:
        before = conn.execute("SELECT count(*) FROM workflows").fetchone()[0]
    with api(base, acme.token) as client:
        response = client.request(method, path.format(alert=acme.alert_id), content=body,
                                  headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert contains in detail and detail.endswith(".") and "\n" not in detail
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM workflows").fetchone()[0] == before
