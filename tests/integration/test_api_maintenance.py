"""Maintenance windows over HTTP: a tenant lists, adds and removes its own, never another tenant's;
the dashboard's alert and tenant pages show the window that covers the workflow now."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from tests.apiutil import api, live_server, make_token, seed_tenant
from tickwarden.clock import isoformat_z


@pytest.fixture
def server(db, clock):
    with live_server(db, clock) as base:
        yield base


@pytest.fixture
def fleet(db, clock):
    acme, beta = seed_tenant(db, clock.now(), "acme"), seed_tenant(db, clock.now(), "beta")
    acme.token = make_token(db, clock.now(), tenant="acme", name="alice")
    beta.token = make_token(db, clock.now(), tenant="beta", name="bob")
    return acme, beta


def one_off(clock, hours: int = 2, **extra):
    return {"start": isoformat_z(clock.now() - timedelta(minutes=5)),
            "end": isoformat_z(clock.now() + timedelta(hours=hours)), **extra}


def test_a_member_adds_lists_and_removes_its_windows(server, fleet, clock):
    acme, _ = fleet
    with api(server, acme.token) as client:
        made = client.post("/api/tenants/acme/maintenance", json=one_off(clock, workflow="nightly", note="warehouse"))
        assert made.status_code == 201, made.text
        body = made.json()
        assert (body["tenant"], body["workflow"], body["source"], body["note"]) == ("acme", "nightly", "api",
                                                                                   "warehouse")
        assert body["active_until"] == isoformat_z(clock.now() + timedelta(hours=2))
        recurring = client.post("/api/tenants/acme/maintenance",
                                json={"cron": "0 1 * * 6", "duration": "2h", "timezone": "Europe/Berlin"})
        assert recurring.status_code == 201, recurring.text
        assert recurring.json()["workflow"] is None and recurring.json()["duration_seconds"] == 7200
        listed = client.get("/api/tenants/acme/maintenance").json()
        assert [w["id"] for w in listed] == [body["id"], recurring.json()["id"]]
        assert client.delete(f"/api/tenants/acme/maintenance/{body['id']}").status_code == 204
        assert client.delete(f"/api/tenants/acme/maintenance/{body['id']}").status_code == 404
        assert [w["id"] for w in client.get("/api/tenants/acme/maintenance").json()] == [recurring.json()["id"]]


def test_a_tenant_cannot_see_add_to_or_remove_another_tenants_windows(server, fleet, clock):
    acme, beta = fleet
    with api(server, acme.token) as alice:
        mine = alice.post("/api/tenants/acme/maintenance", json=one_off(clock)).json()
    with api(server, beta.token) as bob:
        assert bob.get("/api/tenants/acme/maintenance").status_code == 404
        assert bob.post("/api/tenants/acme/maintenance", json=one_off(clock)).status_code == 404
        assert bob.delete(f"/api/tenants/acme/maintenance/{mine['id']}").status_code == 404
        # through its own tenant's path, the other tenant's window id does not exist either
        assert bob.delete(f"/api/tenants/beta/maintenance/{mine['id']}").status_code == 404
        # nor can it aim a window of its own at the other tenant's workflow by name
        own = bob.post("/api/tenants/beta/maintenance", json=one_off(clock, workflow="missing"))
        assert own.status_code == 404
        assert bob.get("/api/tenants/beta/maintenance").json() == []
    with api(server, acme.token) as alice:
        assert [w["id"] for w in alice.get("/api/tenants/acme/maintenance").json()] == [mine["id"]]


@pytest.mark.parametrize(("body", "fragment"), [
    ({"start": "2026-12-01T03:00:00Z", "end": "2026-12-01T01:00:00Z"}, "end must be after"),
    ({"cron": "0 1 * * *"}, "needs a start and an end, or a cron"),
    ({"cron": "not cron", "duration": "1h"}, "cron"),
    ({"cron": "0 1 * * *", "duration": "1h", "timezone": "Nowhere/Land"}, "cron"),
    ({"cron": "0 1 * * *", "duration": "9d"}, "too long"),
    ({"start": "2026-12-01T01:00:00Z", "end": "2026-12-01T03:00:00Z", "cron": "0 1 * * *"}, "not both"),
])
def test_a_bad_window_is_a_422_with_one_sentence_and_stores_nothing(server, fleet, body, fragment):
    acme, _ = fleet
    with api(server, acme.token) as client:
        answer = client.post("/api/tenants/acme/maintenance", json=body)
        assert answer.status_code == 422, answer.text
        assert fragment in answer.json()["detail"]
        assert client.get("/api/tenants/acme/maintenance").json() == []


def test_the_alert_and_tenant_pages_show_the_window_covering_the_workflow(server, fleet, clock):
    acme, beta = fleet
    with api(server, acme.token) as client:
        window = client.post("/api/tenants/acme/maintenance",
                             json=one_off(clock, workflow="nightly", note="warehouse move")).json()
    cookies = {"tickwarden_token": acme.token}
    page = httpx.get(f"{server}/dashboard/alerts/{acme.alert_id}", cookies=cookies).text
    assert f'data-window="{window["id"]}"' in page and "nothing is delivered until it ends" in page
    assert "warehouse move" in page
    tenant_page = httpx.get(f"{server}/dashboard/tenants/acme", cookies=cookies).text
    assert f'data-window="{window["id"]}"' in tenant_page and ">active<" in tenant_page
    other = httpx.get(f"{server}/dashboard/alerts/{beta.alert_id}", cookies={"tickwarden_token": beta.token}).text
    assert "maintenance window" not in other


def test_the_tenant_pages_form_adds_a_window_and_says_what_is_wrong_with_a_bad_one(server, fleet, clock):
    acme, beta = fleet
    cookies = {"tickwarden_token": acme.token}
    added = httpx.post(f"{server}/dashboard/tenants/acme/maintenance", cookies=cookies,
                       data={"workflow": "nightly", "cron": "0 1 * * 6", "duration": "2h",
                             "timezone": "Europe/Berlin", "note": "weekly vacuum"})
    assert added.status_code == 303 and added.headers["location"] == "/dashboard/tenants/acme"
    with api(server, acme.token) as client:
        (window,) = client.get("/api/tenants/acme/maintenance").json()
    assert (window["workflow"], window["cron"], window["created_by"]) == ("nightly", "0 1 * * 6", "acme:alice")
    bad = httpx.post(f"{server}/dashboard/tenants/acme/maintenance", cookies=cookies,
                     data={"start": "2026-12-01T03:00:00Z", "end": "2026-12-01T01:00:00Z"})
    assert bad.status_code == 400 and "end must be after its start" in bad.text
    foreign = httpx.post(f"{server}/dashboard/tenants/acme/maintenance", cookies={"tickwarden_token": beta.token},
                         data={"cron": "0 1 * * *", "duration": "1h"})
    assert foreign.status_code == 404
    with api(server, acme.token) as client:
        assert len(client.get("/api/tenants/acme/maintenance").json()) == 1
