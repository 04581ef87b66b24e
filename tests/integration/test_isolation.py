"""Another tenant's token gets nothing of theirs from any endpoint: 404 (or 403), never their data."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx

from tests.apiutil import api, live_server, make_token, seed_tenant
from tickwarden import auth, maintenance, secrets
from tickwarden.ack_links import platform_secrets
from tickwarden.transports.recording import RecordingTransport

# A valid body for every endpoint that takes one, so requests pass validation and reach authorization.
BODIES = {
    ("put", "/api/tenants/{tenant}/workflows/{workflow}"): {
        "environment": "default", "publisher": "ops@acme.test", "schedule": {"cron": "0 3 * * *"},
        "steps": [{"name": "load", "kind": "python", "call": "pkg.mod:fn"}]},
    ("put", "/api/tenants/{tenant}/workflows/{workflow}/profile"): {"retries": 7},
    ("post", "/api/alerts/{alert_id}/reassign"): {"owner": "customer", "note": "hijack"},
    ("post", "/api/alerts/{alert_id}/notes"): {"note": "hijack"},
    ("put", "/api/tenants/{tenant}/secrets/{name}"): {"value": "hijack"},
    ("post", "/api/alerts/{alert_id}/acknowledge"): {"note": "hijack"},
    ("post", "/api/alerts/{alert_id}/snooze"): {"seconds": 3600},
    ("post", "/api/alerts/{alert_id}/resolve"): {"note": "hijack"},
    ("put", "/api/tenants/{tenant}/retention"): {"logs_days": 1},
    ("post", "/api/tenants/{tenant}/maintenance"): {"start": "2026-12-24T00:00:00Z", "end": "2026-12-24T02:00:00Z"},
}
# Endpoints a member token may not call at all: they answer 403 whatever the tenant.
PLATFORM_ONLY = {("get", "/api/erasures"), ("post", "/api/erasures")}
SECRET = "acme-secret-log"


def acme_snapshot(db, acme):
    with db.connection() as conn:
        return (
            conn.execute("SELECT count(*) FROM alert_events WHERE tenant_id = %s", (acme.tenant_id,)).fetchone(),
            conn.execute("SELECT owner, status, acknowledged_at, snoozed_until FROM alerts WHERE id = %s",
                         (acme.alert_id,)).fetchone(),
            conn.execute("SELECT archived_at FROM workflows WHERE tenant_id = %s", (acme.tenant_id,)).fetchall(),
            conn.execute("SELECT status, version FROM schedules WHERE tenant_id = %s", (acme.tenant_id,)).fetchall(),
            conn.execute("SELECT count(*) FROM runs WHERE tenant_id = %s", (acme.tenant_id,)).fetchone(),
            conn.execute("SELECT policy_overrides FROM workflows WHERE tenant_id = %s", (acme.tenant_id,)).fetchall(),
            conn.execute("SELECT count(*) FROM workflows WHERE tenant_id = %s", (acme.tenant_id,)).fetchone(),
            conn.execute("SELECT count(*) FROM tenant_secrets WHERE tenant_id = %s", (acme.tenant_id,)).fetchone(),
            conn.execute("SELECT id, starts_at, ends_at FROM maintenance_windows WHERE tenant_id = %s",
                         (acme.tenant_id,)).fetchall(),
        )


def leaks(response: httpx.Response, acme) -> list[str]:
    text = response.text
    found = [word for word in (SECRET, "Acme Inc", "ops@acme.test", "acme-alerts") if word in text]
    if re.search(r'"tenant":\s*"acme"', text):
        found.append("tenant acme")
    return found


def test_every_endpoint_hides_another_tenants_objects(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    globex = seed_tenant(db, clock.now(), "globex")
    intruder = make_token(db, clock.now(), tenant="globex", name="mallory")
    with db.transaction() as store:
        secrets.set_secret(store, secrets.Keyring("test-key"), acme.tenant_id, "WAREHOUSE", SECRET, clock.now())
        window = maintenance.add_window(store, "acme", None, maintenance.window_spec(
            start=clock.now() + timedelta(days=1), end=clock.now() + timedelta(days=1, hours=2)), "ops", clock.now())
    before = acme_snapshot(db, acme)
    acme_credential = auth.issue_run_credential(
        auth.RunKey("acme", "nightly", clock.now() - timedelta(days=1), 1, "ops@acme.test"), clock.now(),
        platform_secrets()[0])
    recording = RecordingTransport()
    # `key`: a ping URL's key is its own credential (no token), so the intruder can only guess one
    values = {"tenant": "acme", "workflow": "nightly", "run_id": acme.run_ids[-1], "alert_id": acme.alert_id,
              "environment_id": acme.environment_id, "channel_id": acme.channel_id, "name": "WAREHOUSE",
              "window_id": window.id, "key": "guessed-" + "x" * 35, "status": "success"}
    with live_server(db, clock, transports=lambda: {"recording": recording}) as base, api(base, intruder) as client:
        spec = client.get("/openapi.json").json()
        checked = 0
        for path, methods in spec["paths"].items():
            for method, operation in methods.items():
                url = path.format(**values)
                params = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
                body = BODIES.get((method, path))
                if "{" in path:
                    assert body is not None or method in ("get", "post", "delete"), f"no body for {method} {path}"
                    response = client.request(method, url, json=body)
                    assert response.status_code in (403, 404), (method, path, response.status_code, response.text)
                elif "tenant" in params:
                    filtered = client.request(method, url, params={"tenant": "acme"})
                    assert filtered.status_code == 404, (method, path, filtered.text)
                    response = client.request(method, url)
                    assert response.status_code == 200, (method, path, response.text)
                    assert response.json()["items"], f"{path} should list globex's own objects"
                elif (method, path) in PLATFORM_ONLY:
                    body = {"tenant": "acme", "dry_run": True} if method == "post" else None
                    response = client.request(method, url, json=body)
                    assert response.status_code == 403, (method, path, response.status_code, response.text)
                elif (method, path) == ("post", "/api/run-credentials/verify"):
                    # a genuine credential of acme's, presented by globex's token
                    response = client.request(method, url, json={"credential": acme_credential})
                    assert response.status_code == 200, (method, path, response.text)
                    assert response.json()["valid"] is False, response.text
                else:
                    response = client.request(method, url)
                    assert response.status_code == 200, (method, path, response.text)
                assert leaks(response, acme) == [], (method, path, response.text)
                checked += 1
        for page in ("/dashboard/tenants/acme", f"/dashboard/alerts/{acme.alert_id}",
                     f"/dashboard/runs/{acme.run_ids[-1]}"):
            response = httpx.get(base + page, cookies={"tickwarden_token": intruder}, follow_redirects=False)
            assert response.status_code == 404 and leaks(response, acme) == [], page
        for form, data in ((f"/dashboard/alerts/{acme.alert_id}/reassign", {"owner": "customer"}),
                           (f"/dashboard/alerts/{acme.alert_id}/notes", {"note": "hijack"}),
                           (f"/dashboard/alerts/{acme.alert_id}/acknowledge", {"note": "hijack"}),
                           (f"/dashboard/alerts/{acme.alert_id}/resolve", {"note": "hijack"})):
            response = httpx.post(base + form, data=data, cookies={"tickwarden_token": intruder})
            assert response.status_code == 404, form
        overview = httpx.get(base + "/dashboard", cookies={"tickwarden_token": intruder}, follow_redirects=True)
        assert overview.url.path == "/dashboard/tenants/globex" and leaks(overview, acme) == []
    assert checked >= 20
    assert acme_snapshot(db, acme) == before, "nothing of acme's may change"
    assert recording.messages == []
    assert globex.alert_id != acme.alert_id
