"""One publish path and one schema: the API's body is a workflow file's entry, written by `catalog.publish`."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from tests.apiutil import api, live_server, make_token, seed_tenant
from tickwarden import catalog
from tickwarden.api.schemas import WorkflowIn
from tickwarden.errors import Conflict
from tickwarden.profile import PolicyOverrides

FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: filed
    description: loads the warehouse
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "30 2 * * *", timezone: Europe/Berlin, starting_deadline_seconds: 120}
    timeout_seconds: 900
    monitoring: true
    policy: {retries: 2, alert_after: 2, first_severity: warning, backoff_seconds: [30, 90]}
    expect_rows: true
    keep_outputs: true
    steps:
      - {name: extract, kind: python, call: "tickwarden.examples_steps:extract", params: {count: 3}}
      - {name: check, kind: sql, depends_on: [extract], query: "select 1", database: "secret:WAREHOUSE",
         timeout_seconds: 60}
"""
READ_ONLY = {"id", "cadence_seconds", "schedule_version", "published_at", "profile", "next_fire_at", "archived_at",
             "created_at", "updated_at", "recent"}
WORKFLOW_COLUMNS = ("description", "environment_id", "publisher_id", "recipe", "timeout_seconds", "monitoring_enabled",
                    "policy_overrides", "shadow", "expect_rows", "keep_outputs", "archived_at", "created_at", "updated_at")
SCHEDULE_COLUMNS = ("s.cron", "s.timezone", "s.status", "s.cadence_seconds", "s.starting_deadline_seconds",
                    "s.version", "s.published_at", "f.next_fire_at", "s.created_at", "s.updated_at")


@pytest.fixture
def fleet(db, clock):
    seed_tenant(db, clock.now(), "acme")
    return make_token(db, clock.now(), tenant="acme", name="alice"), make_token(db, clock.now(), name="oncall")


@pytest.fixture
def server(db, clock):
    with live_server(db, clock) as base:
        yield base


def entry() -> dict:
    """The file's workflow entry as JSON: what the API takes for the same workflow."""
    found = yaml.safe_load(FILE)["workflows"][0]
    found.pop("name")
    return found


def stored(db, workflow: str) -> tuple[tuple, tuple]:
    with db.connection() as conn:
        row = conn.execute(f"SELECT {', '.join('w.' + c for c in WORKFLOW_COLUMNS)}, "
                           f"{', '.join(SCHEDULE_COLUMNS)} FROM workflows w JOIN schedules s ON s.workflow_id = w.id "
                           "JOIN schedule_fires f ON f.schedule_id = s.id WHERE w.name = %s", (workflow,)).fetchone()
    return tuple(row[:len(WORKFLOW_COLUMNS)]), tuple(row[len(WORKFLOW_COLUMNS):])


def test_the_api_and_apply_store_the_same_workflow_for_the_same_content(server, fleet, db, clock, tmp_path):
    member, _ = fleet
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, clock.now())
    with api(server, member) as client:
        published = client.put("/api/tenants/acme/workflows/put", json=entry())
        assert published.status_code == 201, published.text
    assert stored(db, "put") == stored(db, "filed")
    workflow, schedule = stored(db, "put")
    assert workflow[WORKFLOW_COLUMNS.index("policy_overrides")] == {
        "retries": 2, "alert_after": 2, "first_severity": "warning", "backoff_seconds": [30, 90]}
    assert schedule[:3] == ("30 2 * * *", "Europe/Berlin", "active")


def test_get_answers_the_shape_put_takes_and_a_round_trip_changes_nothing(server, fleet, db, clock, tmp_path):
    member, _ = fleet
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, clock.now())
    with api(server, member) as client:
        first = client.get("/api/tenants/acme/workflows/filed").json()
        assert set(first) - set(WorkflowIn.model_fields) == READ_ONLY
        assert set(WorkflowIn.model_fields) <= set(first)
        spec = {key: value for key, value in first.items() if key not in READ_ONLY}
        assert spec["schedule"] == {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "status": "active",
                                    "starting_deadline_seconds": 120}
        assert spec["monitoring"] is True and spec["policy"]["first_severity"] == "warning"
        clock.advance(60)
        again = client.put("/api/tenants/acme/workflows/filed", json=spec)
        assert again.status_code == 200, again.text
        assert again.json() == first  # nothing changed: same version, same updated_at
        copied = client.put("/api/tenants/acme/workflows/copy", json={**spec, "name": None, "tenant": None})
        assert copied.status_code == 201, copied.text
    filed, copy = stored(db, "filed"), stored(db, "copy")
    assert filed[0][:-2] == copy[0][:-2] and filed[1][:5] == copy[1][:5]


@pytest.mark.parametrize("old,value", [
    ("cron", "*/5 * * * *"),
    ("timezone", "UTC"),
    ("paused", True),
    ("monitoring_enabled", False),
    ("policy_overrides", {"retries": 1}),
    ("recipe", {"steps": []}),
])
def test_the_old_api_names_are_unknown_fields(server, fleet, db, old, value):
    member, _ = fleet
    with api(server, member) as client:
        response = client.put("/api/tenants/acme/workflows/old", json={**entry(), old: value})
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == f"Unknown field {old!r} in the request body."
    assert [e["field"] for e in response.json()["errors"]] == [old]
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "old") is None


@pytest.mark.parametrize("old", ["monitoring_enabled: false", "policy_overrides: {retries: 1}", "paused: true"])
def test_the_old_names_are_unknown_keys_in_a_workflow_file(db, clock, tmp_path, old):
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE.replace("    expect_rows: true\n", f"    expect_rows: true\n    {old}\n"))
    with pytest.raises(Exception, match=rf"workflows\[0\]\.{old.split(':')[0]}: unknown key\."):
        catalog.apply_file(db, path, clock.now())


def test_a_policy_is_checked_by_the_one_overrides_schema_everywhere(server, fleet):
    member, _ = fleet
    with api(server, member) as client:
        bad = client.put("/api/tenants/acme/workflows/x", json={**entry(), "policy": {"patience": "high"}})
        assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "policy.patience"
        profile = client.put("/api/tenants/acme/workflows/nightly/profile", json={"rate_window": 10})
        assert profile.status_code == 200, profile.text  # PUT …/profile takes every field the file's policy does
        assert "rate_window" in profile.json()["overridden"]


def test_a_meaning_error_names_its_field_in_errors(server, fleet, db):
    member, _ = fleet
    with api(server, member) as client:
        response = client.put("/api/tenants/acme/workflows/bad",
                              json={**entry(), "schedule": {"cron": "61 * * * *"}})
    assert response.status_code == 422
    body = response.json()
    assert body["detail"].startswith("schedule.cron: ") and body["detail"].endswith(".")
    assert [(e["location"], e["field"]) for e in body["errors"]] == [("body", "schedule.cron")]
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "bad") is None


def test_the_body_may_not_name_another_workflow_or_tenant(server, fleet, db):
    member, _ = fleet
    with api(server, member) as client:
        for key, value in (("name", "other"), ("tenant", "globex")):
            response = client.put("/api/tenants/acme/workflows/mine", json={**entry(), key: value})
            assert response.status_code == 422 and f"'{key}' must match the path" in response.json()["detail"]
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "mine") is None and store.catalog.get_workflow_by_name("acme", "other") is None


def test_only_a_platform_token_changes_shadow_mode(server, fleet, db):
    member, platform = fleet
    with api(server, member) as client:
        refused = client.put("/api/tenants/acme/workflows/quiet", json={**entry(), "shadow": True})
        assert refused.status_code == 403 and "shadow" in refused.json()["detail"]
    with api(server, platform) as client:
        assert client.put("/api/tenants/acme/workflows/quiet", json={**entry(), "shadow": True}).status_code == 201
    with api(server, member) as client:
        kept = client.get("/api/tenants/acme/workflows/quiet").json()
        same = {key: value for key, value in kept.items() if key not in READ_ONLY}
        assert client.put("/api/tenants/acme/workflows/quiet", json=same).status_code == 200  # unchanged: allowed
        assert client.put("/api/tenants/acme/workflows/quiet", json={**same, "shadow": False}).status_code == 403
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "quiet").shadow is True


def test_pause_resume_and_a_paused_file_write_the_schedule_one_way(db, clock, tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, clock.now())
    paused = catalog.pause(db, "acme", "filed", clock.now())
    assert paused.status == "paused" and paused.version == 2
    assert catalog.pause(db, "acme", "filed", clock.now()).version == 2  # already paused: nothing written
    resumed = catalog.resume(db, "acme", "filed", clock.now())
    assert resumed.status == "active" and resumed.version == 3
    workflow, schedule = stored(db, "filed")
    assert schedule[SCHEDULE_COLUMNS.index("f.next_fire_at")] is not None
    path.write_text(FILE.replace("starting_deadline_seconds: 120}", "starting_deadline_seconds: 120, status: paused}"))
    report = catalog.apply_file(db, path, clock.now())
    assert report.changes == [{"kind": "schedule", "name": "acme/filed", "change": "updated"}]
    assert stored(db, "filed")[1][SCHEDULE_COLUMNS.index("f.next_fire_at")] is None


def test_a_profile_change_is_refused_for_an_archived_workflow(db, clock, tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, clock.now())
    catalog.archive(db, "acme", "filed", clock.now())
    with pytest.raises(Conflict, match="archived"):
        catalog.set_policy(db, "acme", "filed", PolicyOverrides(retries=1), clock.now())
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "filed").archived_at is not None


def test_publishing_several_at_once_does_for_each_what_publishing_it_alone_does(db, clock, tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, clock.now())
    catalog.pause(db, "acme", "filed", clock.now())
    with db.transaction() as store:
        found, schedule = catalog.find_schedule(store, "acme", "filed")
        resumed = replace(catalog.Publication.stored(found, schedule), status="active")
        publications = [resumed, replace(resumed, name="fresh"), replace(resumed, name="gone", archived=True)]
        labels = ["acme/filed", "acme/fresh", "acme/gone"]
        report = catalog.ApplyReport("test")
        published = catalog.publish_all(store, publications, clock.now(), actor="test", report=report, labels=labels)
    assert [p.change for p in published] == ["updated", "created", "created"]
    assert [p.schedule.change for p in published] == ["updated", "created", "created"]
    assert report.warnings == ["acme/filed is paused; this file resumes it (set schedule.status: paused "
                               "to keep it paused)."]
    assert report.counts["workflow"] == {"created": 2, "updated": 0, "unchanged": 1}
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "gone").archived_at is not None
        assert store.catalog.get_workflow_by_name("acme", "fresh").archived_at is None
        assert published[1].workflow.id > published[0].workflow.id
        assert published[2].workflow.id > published[1].workflow.id  # written in the order given
    assert stored(db, "fresh")[1][SCHEDULE_COLUMNS.index("f.next_fire_at")] is not None
    with db.transaction() as store:  # the same again: an archived workflow re-archived, the rest identical
        again = catalog.publish_all(store, publications, clock.now(), actor="test", labels=labels)
    assert [p.change for p in again] == ["unchanged"] * 3
