"""API conventions over HTTP: operation ids, every validation error, 201 on create, archive, next tick, lifecycle."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.apiutil import api, live_server, make_token, seed_tenant

BODY = {"environment": "default", "publisher": "ops@acme.test", "schedule": {"cron": "*/5 * * * *"},
        "steps": [{"name": "a", "kind": "python", "call": "tickwarden.examples_steps:extract"}]}


@pytest.fixture
def fleet(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    acme.token = make_token(db, clock.now(), tenant="acme", name="alice")
    platform = make_token(db, clock.now(), name="oncall")
    return acme, platform


@pytest.fixture
def server(db, clock):
    with live_server(db, clock) as base:
        yield base


def test_every_operation_has_a_readable_unique_id(server):
    spec = api(server, None).get("/openapi.json").json()
    ids = [op["operationId"] for path in spec["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z][a-z_]*", i) for i in ids), ids
    assert {"list_alerts", "acknowledge_alert", "publish_workflow", "archive_workflow"} <= set(ids)


def test_it_lists_every_validation_error_in_an_errors_array(server, fleet):
    acme, _ = fleet
    bad = {**BODY, "timeout_seconds": -5, "colour": "vermilion-7"}
    bad.pop("publisher")
    response = api(server, acme.token).put("/api/tenants/acme/workflows/x", json=bad)
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert {e["field"] for e in errors} >= {"publisher", "timeout_seconds", "colour"}, errors
    assert all(e["location"] == "body" and e["message"].endswith(".") for e in errors)
    assert "vermilion-7" not in response.text  # values are never echoed


def test_it_answers_201_on_create_and_200_on_replace_with_the_next_tick(server, fleet, clock):
    acme, _ = fleet
    with api(server, acme.token) as client:
        created = client.put("/api/tenants/acme/workflows/quality", json=BODY)
        assert created.status_code == 201, created.text
        now = clock.now()
        expected = (now.replace(second=0, microsecond=0) + timedelta(minutes=5 - now.minute % 5))
        assert created.json()["next_fire_at"] == expected.strftime("%Y-%m-%dT%H:%M:%SZ")
        replaced = client.put("/api/tenants/acme/workflows/quality", json=BODY)
        assert replaced.status_code == 200
        paused = client.post("/api/tenants/acme/workflows/quality/pause")
        assert paused.json()["next_fire_at"] is None


def test_delete_archives_a_workflow(server, fleet, db):
    acme, _ = fleet
    with api(server, acme.token) as client:
        assert client.put("/api/tenants/acme/workflows/quality", json=BODY).status_code == 201
        assert client.delete("/api/tenants/acme/workflows/quality").status_code == 204
        kept = client.get("/api/tenants/acme/workflows/quality").json()  # its history stays readable
        assert kept["archived_at"] and kept["next_fire_at"] is None
        assert "quality" not in [w["name"] for w in client.get("/api/workflows").json()["items"]]
        assert client.delete("/api/tenants/acme/workflows/quality").status_code == 204  # idempotent
        assert client.delete("/api/tenants/acme/workflows/nope").status_code == 404
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "quality").archived_at is not None


def test_the_alert_lifecycle_over_http_and_internal_notes_stay_internal(server, fleet):
    acme, platform = fleet
    alert = f"/api/alerts/{acme.alert_id}"
    with api(server, acme.token) as member, api(server, platform) as oncall:
        acked = member.post(f"{alert}/acknowledge", json={"note": "on it"})
        assert acked.status_code == 200 and acked.json()["acknowledged_by"] == "acme:alice"
        assert member.post(f"{alert}/acknowledge").status_code == 409
        snoozed = member.post(f"{alert}/snooze", json={"seconds": 3600})
        assert snoozed.status_code == 200 and snoozed.json()["snoozed_until"]
        assert member.post(f"{alert}/snooze", json={"seconds": 5}).status_code == 422
        assert member.post(f"{alert}/notes", json={"note": "x", "internal": True}).status_code == 403
        assert oncall.post(f"{alert}/notes", json={"note": "upstream DBA", "internal": True}).status_code == 201
        assert "upstream DBA" not in member.get(alert).text
        assert "upstream DBA" in oncall.get(alert).text
        assert member.post(f"{alert}/resolve", json={}).status_code == 422
        resolved = member.post(f"{alert}/resolve", json={"note": "fixed by hand"})
        assert resolved.status_code == 200 and resolved.json()["status"] == "resolved"
        kinds = [e["kind"] for e in member.get(alert).json()["events"]]
        assert kinds[-3:] == ["acknowledged", "snoozed", "resolved"]


def test_the_dashboard_acknowledges_resolves_and_hides_internal_notes_from_members(server, fleet):
    import httpx

    acme, platform = fleet
    page = f"{server}/dashboard/alerts/{acme.alert_id}"
    as_oncall = {"tickwarden_token": platform}
    as_member = {"tickwarden_token": acme.token}
    noted = httpx.post(f"{page}/notes", data={"note": "upstream DBA", "internal": "1"}, cookies=as_oncall)
    assert noted.status_code == 303
    refused = httpx.post(f"{page}/notes", data={"note": "sneaky", "internal": "1"}, cookies=as_member)
    assert refused.status_code == 400 and "Only the platform team" in refused.text
    assert "upstream DBA" in httpx.get(page, cookies=as_oncall).text
    assert "upstream DBA" not in httpx.get(page, cookies=as_member).text
    assert httpx.post(f"{page}/acknowledge", data={}, cookies=as_member).status_code == 303
    assert 'id="acknowledged"' in httpx.get(page, cookies=as_member).text
    unexplained = httpx.post(f"{page}/resolve", data={"note": " "}, cookies=as_member)
    assert unexplained.status_code == 400 and "Say why" in unexplained.text
    assert httpx.post(f"{page}/resolve", data={"note": "fixed"}, cookies=as_member).status_code == 303
    assert ">resolved<" in httpx.get(page, cookies=as_member).text
