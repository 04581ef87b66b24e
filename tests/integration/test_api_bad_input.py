"""Bad input and abuse: a clear 4xx problem, never a 5xx, and nothing written.

One seeded schema and one server serve the whole module: none of these requests may
change anything, which each test checks.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import psycopg
import pytest

from tests.apiutil import api, live_server, make_token, seed_tenant
from tests.dbutil import TEST_URL, drop_schema, make_schema
from tickwarden.clock import VirtualClock
from tickwarden.db import Database
from tickwarden.migrate import upgrade


@pytest.fixture(scope="module")
def shared():
    name = make_schema("bad")
    with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
        upgrade(conn, datetime(2026, 1, 1, tzinfo=UTC))
    db = Database(TEST_URL, schema=name, min_size=1, max_size=6)
    clock = VirtualClock(datetime(2026, 11, 30, 9, 0, tzinfo=UTC))
    acme = seed_tenant(db, clock.now(), "acme")
    seed_tenant(db, clock.now(), "globex")
    acme.token = make_token(db, clock.now(), tenant="acme", name="alice")
    try:
        with live_server(db, clock) as base:
            yield base, db, acme
    finally:
        db.close()
        drop_schema(name)


def counts(db):
    with db.connection() as conn:
        return tuple(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                     for table in ("alert_events", "runs", "workflows", "notification_outbox"))


@pytest.mark.parametrize(
    "method,path,payload,status,contains",
    [
        ("post", "/api/alerts/{alert}/reassign", b"{not json", 400, "not valid JSON"),
        ("post", "/api/alerts/{alert}/reassign", b"", 422, "needs a JSON body"),
        ("post", "/api/alerts/{alert}/reassign", {"owner": 7}, 422, "owner"),
        ("post", "/api/alerts/{alert}/reassign", {"owner": "customer", "extra": 1}, 422, "Unknown field 'extra'"),
        ("post", "/api/alerts/{alert}/reassign", ["owner", "customer"], 422, "not valid"),
        ("post", "/api/alerts/{alert}/notes", {"note": "x" * 2001}, 422, "note"),
        ("post", "/api/alerts/{alert}/notes", {"note": "nul \u0000 byte"}, 422, "NUL"),
        ("post", "/api/alerts/{alert}/notes", {}, 422, "'note' is required"),
        ("post", "/api/alerts/9223372036854775808/notes", {"note": "hi"}, 422, "alert_id"),
        ("post", "/api/alerts/0/notes", {"note": "hi"}, 422, "alert_id"),
        ("post", "/api/alerts/424242/notes", {"note": "hi"}, 404, "No alert 424242"),
        ("put", "/api/tenants/acme/workflows/nightly/profile", {"retries": "many"}, 422, "retries"),
        ("put", "/api/tenants/acme/workflows/nightly/profile", {"alert_after": 5, "escalate_after": 2}, 422,
         "escalate_after"),
        ("put", "/api/tenants/acme/workflows/x'%20OR%20'1'='1", {"schedule": {"cron": "* * * * *"}}, 422, "workflow"),
        ("put", "/api/tenants/acme/workflows/new",
         {"environment": "default", "publisher": "ops@acme.test",
          "schedule": {"cron": "0 2 * * *", "timezone": "Mars/Olympus"},
          "steps": [{"name": "a", "kind": "python", "call": "m:f"}]}, 422, "schedule.timezone: unknown timezone"),
        ("put", "/api/tenants/acme/workflows/new",
         {"environment": "nope", "publisher": "ops@acme.test", "schedule": {"cron": "0 2 * * *"},
          "steps": [{"name": "a", "kind": "python", "call": "m:f"}]}, 422, "no environment named 'nope'"),
        ("put", "/api/tenants/acme/workflows/new",
         {"environment": "default", "publisher": "ops@acme.test", "schedule": {"cron": "0 2 * * *"},
          "steps": [{"name": "a", "kind": "python", "call": "m:f", "params": {"k": "\u0000"}}]}, 422, "NUL"),
        ("get", "/api/tenants/acme'%3B%20DROP%20TABLE%20runs%3B--/workflows/nightly", None, 422, "tenant"),
        ("get", "/api/alerts?tenant=acme'--", None, 422, "tenant"),
        ("get", "/api/alerts?cursor=not-a-cursor", None, 400, "cursor"),
        ("get", "/api/alerts?cursor=WyJ4Il0", None, 400, "cursor"),
        ("get", "/api/tenants/acme/workflows/nightly/runs?cursor=WzEsMl0", None, 400, "cursor"),
        ("get", "/api/alerts?limit=100000", None, 422, "limit"),
        ("get", "/api/alerts?limit=abc", None, 422, "limit"),
        ("get", "/api/nothing-here", None, 404, "nothing at"),
        ("delete", "/api/alerts/{alert}", None, 405, "DELETE"),
    ],
)
def test_bad_input_gets_a_clear_4xx_and_writes_nothing(shared, method, path, payload, status, contains):
    base, db, acme = shared
    before = counts(db)
    url = path.format(alert=acme.alert_id)
    with api(base, acme.token) as client:
        if isinstance(payload, bytes):
            response = client.request(method, url, content=payload, headers={"content-type": "application/json"})
        elif payload is not None:
            response = client.request(method, url, content=json.dumps(payload),
                                      headers={"content-type": "application/json"})
        else:
            response = client.request(method, url)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status and body["detail"].endswith(".") and contains in body["detail"], body["detail"]
    assert counts(db) == before
