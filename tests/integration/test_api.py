"""The REST API against a real server (uvicorn on a free port) and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest

from tests.apiutil import RecordingTransport, api, live_server, make_token, seed_tenant


@pytest.fixture
def fleet(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    globex = seed_tenant(db, clock.now(), "globex")
    acme.token = make_token(db, clock.now(), tenant="acme", name="alice")
    globex.token = make_token(db, clock.now(), tenant="globex", name="gina")
    platform = make_token(db, clock.now(), name="oncall")
    return acme, globex, platform


@pytest.fixture
def recording():
    return RecordingTransport()


@pytest.fixture
def server(db, clock, recording):
    with live_server(db, clock, transports=lambda: {"recording": recording}) as base:
        yield base


def assert_problem(response, status, contains=""):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status and body["detail"].endswith(".")
    assert contains in body["detail"], body["detail"]
    return body


def test_it_rejects_requests_without_a_valid_token(server, fleet):
    assert_problem(api(server, None).get("/api/alerts"), 401, "Bearer")
    assert_problem(api(server, "twk_not-a-real-token-at-all").get("/api/alerts"), 401, "unknown or revoked")


def test_a_member_sees_only_its_tenant_and_the_platform_sees_all(server, fleet):
    acme, globex, platform = fleet
    with api(server, acme.token) as client:
        assert client.get("/api/me").json() == {"name": "alice", "role": "member", "tenant": "acme"}
        assert [t["name"] for t in client.get("/api/tenants").json()["items"]] == ["acme"]
        assert {a["tenant"] for a in client.get("/api/alerts").json()["items"]} == {"acme"}
    with api(server, platform) as client:
        assert [t["name"] for t in client.get("/api/tenants").json()["items"]] == ["acme", "globex"]
        assert {a["tenant"] for a in client.get("/api/alerts").json()["items"]} == {"acme", "globex"}


def test_workflow_detail_shows_cadence_profile_and_recent_ticks(server, fleet):
    acme, _, _ = fleet
    body = api(server, acme.token).get("/api/tenants/acme/workflows/nightly").json()
    assert body["schedule"]["cron"] == "0 2 * * *" and body["cadence_seconds"] == 86400
    assert body["profile"]["band"] == "daily" and body["profile"]["first_severity"] == "critical"
    assert [o["status"] for o in body["recent"]] == ["failed", "failed", "succeeded"]


def test_profile_overrides_are_validated_and_applied(server, fleet):
    acme, _, _ = fleet
    with api(server, acme.token) as client:
        changed = client.put("/api/tenants/acme/workflows/nightly/profile", json={"retries": 5, "alert_after": 2})
        assert changed.status_code == 200 and changed.json()["retries"] == 5
        assert changed.json()["overridden"] == ["alert_after", "retries"]
        assert client.get("/api/tenants/acme/workflows/nightly/profile").json()["retries"] == 5
        assert_problem(client.put("/api/tenants/acme/workflows/nightly/profile", json={"retries": -1}), 422, "retries")
        assert_problem(client.put("/api/tenants/acme/workflows/nightly/profile", json={"colour": "red"}), 422,
                       "Unknown field 'colour'")


def test_the_retry_backoff_is_shown_and_overridable_like_every_profile_field(server, fleet):
    acme, _, _ = fleet
    with api(server, acme.token) as client:
        assert client.get("/api/tenants/acme/workflows/nightly/profile").json()["backoff_seconds"] == [60, 300, 900]
        changed = client.put("/api/tenants/acme/workflows/nightly/profile", json={"backoff_seconds": [120]})
        assert changed.status_code == 200 and changed.json()["backoff_seconds"] == [120, 120, 120]
        assert client.get("/api/tenants/acme/workflows/nightly/profile").json()["backoff_seconds"] == [120, 120, 120]
        assert_problem(client.put("/api/tenants/acme/workflows/nightly/profile", json={"backoff_seconds": [-1]}), 422,
                       "backoff_seconds")


def test_pause_resume_and_run_now_act_on_the_schedule_and_ledger(server, fleet):
    acme, _, _ = fleet
    with api(server, acme.token) as client:
        assert client.post("/api/tenants/acme/workflows/nightly/pause").json()["schedule"]["status"] == "paused"
        assert client.post("/api/tenants/acme/workflows/nightly/resume").json()["schedule"]["status"] == "active"
        run = client.post("/api/tenants/acme/workflows/nightly/run-now")
        assert run.status_code == 202 and run.json()["manual"] and run.json()["requested_by"] == "acme:alice"
        runs = client.get("/api/tenants/acme/workflows/nightly/runs", params={"limit": 2}).json()
        assert runs["items"][0]["id"] == run.json()["id"] and runs["next_cursor"]
        rest = client.get("/api/tenants/acme/workflows/nightly/runs",
                          params={"limit": 2, "cursor": runs["next_cursor"]}).json()
        assert len(rest["items"]) == 2 and rest["next_cursor"] is None


def test_publishing_creates_a_workflow_with_its_schedule(server, fleet):
    acme, _, _ = fleet
    body = {"environment": "default", "publisher": "ops@acme.test", "schedule": {"cron": "*/5 * * * *"},
            "steps": [{"name": "check", "kind": "sql", "query": "select 1", "database": "secret:WAREHOUSE"}]}
    with api(server, acme.token) as client:
        created = client.put("/api/tenants/acme/workflows/quality-check", json=body)
        assert created.status_code == 201, created.text
        assert created.json()["profile"]["band"] == "frequent" and created.json()["schedule"]["status"] == "active"
        bad = client.put("/api/tenants/acme/workflows/quality-check", json={**body, "schedule": {"cron": "61 * * * *"}})
        assert_problem(bad, 422, "61 * * * *")
        cyclic = [{"name": "a", "kind": "python", "call": "m:f", "depends_on": ["a"]}]
        assert_problem(client.put("/api/tenants/acme/workflows/loop", json={**body, "steps": cyclic}), 422, "itself")


def test_a_run_shows_its_attempts_with_sanitized_logs(server, fleet):
    acme, _, _ = fleet
    body = api(server, acme.token).get(f"/api/runs/{acme.run_ids[-1]}").json()
    assert body["status"] == "failed" and body["attempts"][0]["error"] == "connection reset by peer"
    assert body["attempts"][0]["steps"][0]["step"] == "load"


def test_alerts_filter_and_show_history_and_the_failing_log(server, fleet):
    acme, _, platform = fleet
    with api(server, platform) as client:
        assert client.get("/api/alerts", params={"severity": "warning"}).json()["items"] == []
        only = client.get("/api/alerts", params={"tenant": "globex", "status": "open", "owner": "engineering"})
        assert [a["tenant"] for a in only.json()["items"]] == ["globex"]
        assert_problem(client.get("/api/alerts", params={"severity": "fatal"}), 422, "severity")
        detail = client.get(f"/api/alerts/{acme.alert_id}").json()
        assert [e["kind"] for e in detail["events"]] == ["opened"]
        assert detail["reason"] == "consecutive_failures"
        assert detail["failing_step"]["step"] == "load" and "acme-secret-log" in detail["failing_step"]["log"]


def test_reassigning_with_a_note_records_the_handoff_and_notifies(server, fleet, db):
    acme, _, _ = fleet
    with api(server, acme.token) as client:
        moved = client.post(f"/api/alerts/{acme.alert_id}/reassign", json={"owner": "customer", "note": "our schema change"})
        assert moved.status_code == 200 and moved.json()["owner"] == "customer"
        noted = client.post(f"/api/alerts/{acme.alert_id}/notes", json={"note": "fixing it now"})
        assert noted.status_code == 201 and noted.json()["actor"] == "acme:alice"
        kinds = [(e["kind"], e["note"]) for e in client.get(f"/api/alerts/{acme.alert_id}").json()["events"]]
    assert kinds == [("opened", None), ("reassigned", "our schema change"), ("noted", "fixing it now")]
    with db.connection() as conn:
        queued = conn.execute("SELECT count(*) FROM notification_outbox WHERE alert_id = %s", (acme.alert_id,)).fetchone()
    assert queued[0] == 2  # the reassignment and the (customer-visible) note reached acme's channel


def test_environments_and_channels_are_listed_and_a_test_message_is_sent(server, fleet, recording):
    acme, globex, _ = fleet
    with api(server, acme.token) as client:
        envs = client.get("/api/environments").json()["items"]
        assert [(e["tenant"], e["name"]) for e in envs] == [("acme", "default")]
        assert client.get(f"/api/environments/{acme.environment_id}").json()["instances"] == []
        channels = client.get("/api/channels").json()["items"]
        assert [c["name"] for c in channels] == ["acme-alerts"]
        sent = client.post(f"/api/channels/{acme.channel_id}/test")
        assert sent.json() == {"channel_id": acme.channel_id, "delivered": True, "detail": "The test message was delivered."}
        assert_problem(client.post(f"/api/channels/{globex.channel_id}/test"), 404)
    assert len(recording.messages) == 1 and recording.messages[0].channel == "acme"


def test_huge_bodies_are_refused_with_413(server, fleet):
    acme, _, _ = fleet
    with api(server, acme.token) as client:
        big = client.post(f"/api/alerts/{acme.alert_id}/notes", content=b"x" * (70 * 1024),
                          headers={"content-type": "application/json"})
        assert_problem(big, 413, "64 KiB")

        def chunks():
            for _ in range(80):
                yield b"x" * 1024

        streamed = client.post(f"/api/alerts/{acme.alert_id}/notes", content=chunks(),
                               headers={"content-type": "application/json"})
        assert_problem(streamed, 413, "64 KiB")


def test_health_readiness_and_openapi(server, fleet):
    with api(server, None) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ready"}
        spec = client.get("/openapi.json").json()
        assert "/api/alerts/{alert_id}/reassign" in spec["paths"]
        assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_a_resolved_alert_cannot_be_reassigned(server, fleet, db, clock):
    acme, _, _ = fleet
    with db.connection() as conn, conn.transaction():
        conn.execute("UPDATE alerts SET status = 'resolved', resolved_at = %s, downtime_seconds = 3600 WHERE id = %s",
                     (clock.now(), acme.alert_id))
    response = api(server, acme.token).post(f"/api/alerts/{acme.alert_id}/reassign", json={"owner": "customer"})
    assert_problem(response, 409, "resolved")


def test_notes_are_escaped_on_the_dashboard(server, fleet):
    acme, _, _ = fleet
    with api(server, acme.token) as client:
        assert client.post(f"/api/alerts/{acme.alert_id}/notes", json={"note": "<script>alert(1)</script>"}).status_code == 201
    page = httpx.get(f"{server}/dashboard/alerts/{acme.alert_id}", cookies={"tickwarden_token": acme.token})
    assert page.status_code == 200 and "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;" in page.text


def test_a_failing_transport_reads_as_not_delivered(db, clock, fleet):
    acme, _, _ = fleet

    class Broken:
        def send(self, message):
            raise RuntimeError("no route to https://hooks.example/abc?token=hunter2")

    with live_server(db, clock, transports=lambda: {"recording": Broken()}) as base:
        sent = api(base, acme.token).post(f"/api/channels/{acme.channel_id}/test")
    assert sent.status_code == 200 and sent.json()["delivered"] is False
    assert "hunter2" not in sent.json()["detail"] and "RuntimeError" in sent.json()["detail"]


def test_two_api_replicas_act_on_one_alert_at_once_without_losing_or_doubling(db, clock, fleet):
    from concurrent.futures import ThreadPoolExecutor

    acme, _, platform = fleet
    with live_server(db, clock) as first, live_server(db, clock) as second:
        # Each app builds its routes at its first request, silencing a pydantic warning with
        # warnings.catch_warnings, which two apps in one process (two threads) undo for each
        # other: one request each first, one after the other (one app per process in service).
        for base in (first, second):
            assert api(base, platform).get(f"/api/alerts/{acme.alert_id}").status_code == 200

        def act(i):
            base = (first, second)[i % 2]
            with api(base, acme.token if i % 3 else platform) as client:
                if i % 4 == 0:
                    return client.post(f"/api/alerts/{acme.alert_id}/reassign",
                                       json={"owner": ("customer", "engineering")[i // 4 % 2]}).status_code
                return client.post(f"/api/alerts/{acme.alert_id}/notes", json={"note": f"note {i}"}).status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(act, range(24)))
        events = api(first, platform).get(f"/api/alerts/{acme.alert_id}").json()["events"]
    assert all(status in (200, 201) for status in statuses), statuses
    notes = sorted(e["note"] for e in events if e["kind"] == "noted")
    assert notes == sorted(f"note {i}" for i in range(24) if i % 4)
    handoffs = [e for e in events if e["kind"] == "reassigned"]
    # each handoff starts from the owner the previous one left: compare-and-set under a row lock
    owner = "engineering"
    for event in handoffs:
        assert event["data"].get("from") == owner
        owner = event["owner"]
    assert len(handoffs) == 6


def test_dashboard_login_sets_an_httponly_cookie_and_never_redirects_off_site(server, fleet):
    acme, _, _ = fleet
    with httpx.Client(base_url=server) as client:
        assert client.get("/dashboard").headers["location"].startswith("/login")
        refused = client.post("/login", data={"token": "twk_wrong_wrong_wrong_wrong", "next": "/dashboard"})
        assert refused.status_code == 401 and "unknown or revoked" in refused.text
        accepted = client.post("/login", data={"token": acme.token, "next": "//evil.example/x"})
        assert accepted.status_code == 303 and accepted.headers["location"] == "/dashboard"
        cookie = accepted.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert client.get("/dashboard").headers["location"] == "/dashboard/tenants/acme"
        assert client.post("/logout").status_code == 303
        assert client.get("/dashboard").headers["location"].startswith("/login")
    with httpx.Client(base_url=server) as client:
        once = client.get(f"/dashboard/tenants/acme?token={acme.token}")
        assert once.status_code == 303 and once.headers["location"] == "/dashboard/tenants/acme"
        assert client.get("/dashboard/tenants/acme").status_code == 200
