"""`tickwarden channels` and `tickwarden outbox` through the real CLI, against real servers."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL
from tests.integration.fake_servers import SlackFake, WebhookFake
from tests.integration.notify_builders import open_alert
from tickwarden.notifier import Notifier
from tickwarden.transports.slack import SlackTransport
from tickwarden.transports.webhook import verify

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
TOKEN = "xoxb-cli-test-token"


@pytest.fixture
def cli(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path), "COLUMNS": "220", "TW_CLI_SLACK": TOKEN, "TW_CLI_HOOK": "k3y"}

    def run(*args):
        return subprocess.run([str(BIN), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    return run


@pytest.fixture
def slack():
    server = SlackFake(token=TOKEN).start()
    yield server
    server.stop()


def test_channels_are_added_tested_listed_and_reenabled(cli, db, clock, slack, monkeypatch):
    with db.transaction() as store:
        store.catalog.upsert_tenant("acme", clock.now())
    added = cli("channels", "add", "alerts", "--kind", "slack", "--tenant", "acme", "--set", "channel=C0CUSTOMER",
                "--set", f"base_url={slack.base_url}", "--secret-ref", "env:TW_CLI_SLACK")
    assert added.returncode == 0, added.stderr

    tested = cli("channels", "test", "alerts")
    assert tested.returncode == 0, tested.stderr
    assert "delivered" in tested.stdout and len(slack.posts) == 1 and "Test message" in slack.posts[0]["text"]

    # a permanent error during delivery disables the channel, visibly
    open_alert(db, clock.now())
    slack.fail_error = "account_inactive"
    monkeypatch.setenv("TW_CLI_SLACK", TOKEN)
    Notifier(db, "n1", {"slack": SlackTransport(timeout=5)}).run_once(clock.now())
    (row,) = json.loads(cli("channels", "--json").stdout)
    assert (row["tenant"], row["name"], row["enabled"]) == ("acme", "alerts", False)
    assert "account_inactive" in row["disabled_reason"] and row["backlog"]["dead"] == 1
    assert "TW_CLI_SLACK" in row["secret_ref"] and TOKEN not in json.dumps(row)
    listed = cli("channels")
    assert listed.returncode == 0 and "disabled" in listed.stdout and "account_inactive" in listed.stdout

    outbox = json.loads(cli("outbox", "--json").stdout)
    assert outbox["dead"] == 1 and outbox["problems"][0]["channel"] == "acme/alerts"
    assert "account_inactive" in cli("outbox").stdout

    assert cli("channels", "enable", "alerts", "--tenant", "acme").returncode == 0
    assert json.loads(cli("channels", "--json").stdout)[0]["enabled"] is True


def test_a_failing_test_message_says_why_in_one_line(cli, db, clock):
    port = WebhookFake().port  # nothing listens there
    added = cli("channels", "add", "hook", "--kind", "webhook", "--set", f"url=http://127.0.0.1:{port}/x",
                "--secret-ref", "env:TW_CLI_HOOK")
    assert added.returncode == 0, added.stderr
    failed = cli("channels", "test", "hook")
    assert failed.returncode == 1
    assert failed.stderr.strip().startswith("tickwarden: The test message to platform/hook failed (transient)")
    assert "Traceback" not in failed.stderr
    unknown = cli("channels", "test", "nope")
    assert unknown.returncode == 1 and "No notification channel named 'nope'" in unknown.stderr


def test_a_webhook_test_message_is_signed(cli, db, clock):
    hook = WebhookFake().start()
    try:
        cli("channels", "add", "hook", "--kind", "webhook", "--set", f"url={hook.url}/x", "--secret-ref",
            "env:TW_CLI_HOOK")
        assert cli("channels", "test", "hook").returncode == 0
        [request] = hook.requests
        assert verify("k3y", request.body, request.headers["x-tickwarden-signature"])
        assert json.loads(request.body)["event"] == "test"
    finally:
        hook.stop()


def test_a_channel_added_with_a_routing_lists_it_and_an_unknown_severity_exits_2(cli, db, clock):
    with db.transaction() as store:
        store.catalog.upsert_tenant("acme", clock.now())
    added = cli("channels", "add", "pager", "--kind", "webhook", "--set", "url=https://pager.test/hook",
                "--severity", "critical", "--event", "escalated", "--event", "opened")
    assert added.returncode == 0, added.stderr
    (row,) = json.loads(cli("channels", "--json").stdout)
    assert (row["severities"], row["events"]) == (["critical"], ["escalated", "opened"])
    refused = cli("channels", "add", "tickets", "--kind", "webhook", "--tenant", "acme", "--severity", "info")
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0
    assert "Severity 'info' is not one of warning, critical." in refused.stderr


def test_a_channel_whose_settings_cannot_work_safely_is_refused_in_one_sentence(cli, db, clock):
    mail = ("channels", "add", "mail", "--kind", "email", "--set", "host=smtp.example.test", "--set",
            "from=tw@ops.example", "--set", "to=oncall@ops.example", "--set", "username=ops",
            "--secret-ref", "env:TW_CLI_HOOK")
    refused = cli(*mail)
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0
    assert ("Setting 'username': an email channel that logs in needs 'starttls' or 'ssl', or its password "
            "would cross the network in the clear.") in refused.stderr
    hook = cli("channels", "add", "hook", "--kind", "webhook", "--set", "url=file:///etc/passwd")
    assert hook.returncode == 2 and "Setting 'url': not an http or https address with a host" in hook.stderr
    assert "passwd" not in hook.stderr and "Traceback" not in refused.stderr + hook.stderr
    nowhere = cli("channels", "add", "mail", "--kind", "email", "--set", "to=oncall@ops.example")
    assert nowhere.returncode == 2 and nowhere.stderr.strip().count("\n") == 0
    assert "Setting 'host': an email channel needs 'host', the SMTP server to send through." in nowhere.stderr
    tokenless = cli("channels", "add", "chat", "--kind", "slack", "--set", "channel=C0123")
    assert tokenless.returncode == 2
    assert "Option --secret-ref: a slack channel needs 'secret_ref' for its Slack token." in tokenless.stderr
    assert json.loads(cli("channels", "--json").stdout) == []
    added = cli(*mail, "--set", "starttls=true")
    assert added.returncode == 0, added.stderr
    (row,) = json.loads(cli("channels", "--json").stdout)
    assert row["kind"] == "email"
