"""Canary credentials planted in a failing step come out nowhere: not in the attempt, its steps,
the run, the alert, the webhook payload, the API, the dashboard or the CLI. One test per form."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.apiutil import api, live_server, make_token
from tests.dbutil import TEST_URL
from tests.execution_helpers import (
    SECRET,
    make_runnable,
    python_step,
    queue_run,
    set_secret,
)
from tests.integration.fake_servers import WebhookFake
from tickwarden.notifier import Notifier
from tickwarden.poller import OutcomePoller
from tickwarden.transports.webhook import WebhookTransport
from tickwarden.worker import Worker

ROOT = Path(__file__).resolve().parents[2]
GIVEN = "CANARYgiven0099zz"  # the tenant secret the step declared, echoed under no key at all
FORMS = {
    "aws env": ("AWS_SECRET_ACCESS_KEY=CANARYaws0001xyz", "CANARYaws0001xyz"),
    "db env": ("DB_PASSWORD=CANARYdb0002xyz", "CANARYdb0002xyz"),
    "pg env": ("PGPASSWORD=CANARYpg0003xyz", "CANARYpg0003xyz"),
    "python dict": ("{'password': 'CANARYdict0004'}", "CANARYdict0004"),
    "json": ('{"api_key": "CANARYjson0005"}', "CANARYjson0005"),
    "basic auth": ("Authorization: Basic Q0FOQVJZYmFzaWMwMDA2", "Q0FOQVJZYmFzaWMwMDA2"),
    "token word": ("token CANARYtok0007xyz", "CANARYtok0007xyz"),
    "next line": ("password:\n    CANARYnext0008", "CANARYnext0008"),
}


@pytest.fixture
def hook():
    server = WebhookFake().start()
    yield server
    server.stop()


def surfaces(db, clock, hook, schema, text):
    """Drive one failing run through worker, poller and notifier; return every surface's text."""
    wf = make_runnable(db, clock.now(), [
        {**python_step("load", "leak", params={"text": text, "echo": "API_TOKEN"}), "secrets": ["secret:API_TOKEN"]}])
    set_secret(db, wf.tenant_id, "API_TOKEN", GIVEN, clock.now())
    with db.transaction() as store:
        store.outbox.upsert_notification_channel(tenant_id=wf.tenant_id, name="hook", kind="webhook", audience="customer",
                                          config={"url": hook.url}, now=clock.now())
    run = queue_run(db, wf, clock.now(), clock.now(), budget=0)
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    try:
        worker.run_once(clock.now())
    finally:
        worker.close(clock.now())
    OutcomePoller(db, "p1").run_once(clock.now())
    Notifier(db, "n1", {"webhook": WebhookTransport(timeout=5)}).run_once(clock.now())
    found = {}
    with db.connection() as conn:
        for table, column in (("attempts", "error"), ("attempts", "log_tail"), ("attempts", "outputs"),
                              ("attempt_steps", "log"), ("attempt_steps", "error"), ("attempt_steps", "output"),
                              ("runs", "error"), ("alerts", "last_error")):
            found[f"{table}.{column}"] = str(conn.execute(f"SELECT {column} FROM {table}").fetchall())
        alert_id = conn.execute("SELECT id FROM alerts").fetchone()[0]
    # The surfaces carry the step's text (redacted), so an absent canary means redaction, not silence.
    assert "RuntimeError" in found["attempts.error"] and "connecting with" in found["attempt_steps.log"]
    assert "RuntimeError" in found["alerts.last_error"]
    found["webhook payload"] = " ".join(r.body.decode() for r in hook.requests)
    assert "RuntimeError" in found["webhook payload"], "the alert must have been delivered with its error"
    token = make_token(db, clock.now(), tenant="acme", name="alice")
    with live_server(db, clock) as base, api(base, token) as client:
        found["API run"] = client.get(f"/api/runs/{run.id}").text
        found["API alert"] = client.get(f"/api/alerts/{alert_id}").text
        client.cookies.set("tickwarden_token", token)
        found["dashboard run"] = client.get(f"/dashboard/runs/{run.id}").text
        found["dashboard alert"] = client.get(f"/dashboard/alerts/{alert_id}").text
    assert "load" in found["API run"]
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}"}
    for label, args in (("CLI runs", ["runs", "acme/nightly", "--json"]), ("CLI alerts", ["alerts", "--json"]),
                        ("CLI alert", ["alerts", "show", str(alert_id)])):
        done = subprocess.run([str(ROOT / ".venv" / "bin" / "tickwarden"), *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        found[label] = done.stdout + done.stderr
    return found


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_canary_form_is_redacted_on_every_surface(db, clock, hook, schema, form):
    text, secret = FORMS[form]
    found = surfaces(db, clock, hook, schema, text)
    leaked = [surface for surface, content in found.items() if secret in content or GIVEN in content]
    assert leaked == [], f"{form} leaked on {leaked}"
