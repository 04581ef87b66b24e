"""`tickwarden selftest` against a real `tickwarden serve` on a fresh schema, with local webhook receivers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from tests.dbutil import TEST_URL
from tests.integration.fake_servers import WebhookFake, free_port
from tickwarden.db import Database

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
pytestmark = pytest.mark.slow
NOW = datetime(2026, 12, 1, tzinfo=UTC)
# Every table that could keep a trace of the synthetic tenant.
TRACES = ("tenants", "selftests", "workflows", "runs", "attempts", "alerts", "alert_events",
          "notification_outbox", "notification_threads")


def _env(schema: str, tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path), "TICKWARDEN_ALLOW_PRIVATE_URLS": "127.0.0.0/8",
           "NO_COLOR": "1"}
    env.pop("TICKWARDEN_SCHEMA", None)
    return env


def _channel(schema: str, name: str, url: str, tenant: str | None = None) -> None:
    with Database(TEST_URL, schema=schema, max_size=1) as db, db.transaction() as store:
        tenant_id = store.catalog.upsert_tenant(tenant, NOW).id if tenant else None
        store.outbox.upsert_notification_channel(tenant_id=tenant_id, name=name, kind="webhook",
                                          audience="customer" if tenant else "engineering",
                                          now=NOW, config={"url": url})


@contextmanager
def _serving(env: dict[str, str], tmp_path: Path) -> Iterator[None]:
    log = open(tmp_path / "serve.log", "w+")  # noqa: SIM115 - closed below, after serve exits
    serve = subprocess.Popen([str(BIN), "serve", "--no-api", "--replica-id", "selftest-replica"], cwd=ROOT, env=env,
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        yield
        assert serve.poll() is None, "serve exited early"
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()
        log.seek(0)
        output = log.read()
        log.close()
        assert "Traceback" not in output, output


def _selftest(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), "selftest", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)


def _traces(schema: str) -> dict[str, int]:
    with psycopg.connect(TEST_URL, options=f"-c search_path={schema}") as conn:
        found = {}
        for table in TRACES:
            query = (f"SELECT count(*) FROM {table} t JOIN tenants n ON n.id = t.tenant_id"  # noqa: S608 - fixed names
                     " WHERE n.name LIKE 'tickwarden-selftest%%'") if table != "tenants" else (
                "SELECT count(*) FROM tenants WHERE name LIKE 'tickwarden-selftest%%'")
            found[table] = conn.execute(query).fetchone()[0]
        # rows of a deleted tenant would not join: count them by the absence of their tenant too
        for table in TRACES[1:]:
            found[f"{table} (orphans)"] = conn.execute(
                f"SELECT count(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM tenants n WHERE n.id = t.tenant_id)"  # noqa: S608
                " AND t.tenant_id IS NOT NULL").fetchone()[0]
    return {k: v for k, v in found.items() if v}


def test_selftest_passes_and_every_route_gets_the_two_alerts_marked_as_test(schema, tmp_path):
    platform, customer = WebhookFake().start(), WebhookFake().start()
    try:
        _channel(schema, "oncall", f"{platform.url}/hook")
        _channel(schema, "acme-alerts", f"{customer.url}/hook", tenant="acme")
        env = _env(schema, tmp_path)
        with _serving(env, tmp_path):
            result = _selftest(env, "--tenant", "acme", "--json", "--timeout", "120")
            delivered = {"platform": list(platform.requests), "customer": list(customer.requests)}
    finally:
        platform.stop()
        customer.stop()
    assert result.returncode == 0, (result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert report["passed"] and report["cleaned_up"]
    assert {r["route"]: (r["expected"], r["delivered"], r["passed"]) for r in report["routes"]} == {
        "platform/oncall": (2, 2, True), "acme/acme-alerts": (2, 2, True)}
    assert all(c["passed"] for c in report["checks"])
    assert "repeating the passes sends nothing new" in {c["name"] for c in report["checks"]}
    for requests in delivered.values():
        bodies = [r.json() for r in requests]
        assert len(bodies) == 2, bodies  # the repeat sent nothing new
        assert all(b["test"] is True and b["summary"].startswith("TEST") for b in bodies)
        assert sorted(b["workflow"] for b in bodies) == ["missed-tick", "retries-exhausted"]
        assert all(b["event"] == "opened" and b["tenant"].startswith("tickwarden-selftest-") for b in bodies)
    assert _traces(schema) == {}


def test_a_route_whose_receiver_is_down_fails_and_the_selftest_exits_non_zero(schema, tmp_path):
    _channel(schema, "oncall", f"http://127.0.0.1:{free_port()}/hook")  # nothing listens there
    env = _env(schema, tmp_path)
    with _serving(env, tmp_path):
        result = _selftest(env, "--timeout", "60")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "platform/oncall" in result.stdout and "delivery failed" in result.stdout
    assert "selftest FAILED; its records were removed." in result.stdout
    assert "Traceback" not in result.stderr
    assert _traces(schema) == {}


def test_no_send_stops_at_the_outbox_and_delivers_nothing(schema, tmp_path):
    receiver = WebhookFake().start()
    try:
        _channel(schema, "oncall", f"{receiver.url}/hook")
        env = _env(schema, tmp_path)
        with _serving(env, tmp_path):
            result = _selftest(env, "--no-send", "--json", "--timeout", "120")
        received = list(receiver.requests)
    finally:
        receiver.stop()
    assert result.returncode == 0, (result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert [(r["route"], r["expected"], r["held"], r["delivered"]) for r in report["routes"]] == [
        ("platform/oncall", 2, 2, 0)]
    assert received == []
    assert _traces(schema) == {}


def test_selftest_without_a_running_service_fails_and_says_which_loops_did_not_pass(schema, tmp_path):
    _channel(schema, "oncall", "http://127.0.0.1:9/hook")
    result = _selftest(_env(schema, tmp_path), "--timeout", "3")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "is `tickwarden serve` running" in result.stdout
    assert _traces(schema) == {}


def test_selftest_with_no_channel_to_test_says_so(schema, tmp_path):
    result = _selftest(_env(schema, tmp_path), "--timeout", "3")
    assert result.returncode == 1
    assert result.stderr.strip() == ("tickwarden: There is no notification channel to test: add a platform channel "
                                     "(engineering audience, no tenant) or name a tenant with --tenant.")
    assert _traces(schema) == {}
