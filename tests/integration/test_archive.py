"""Archiving a workflow: no more ticks, its history stays readable, from the CLI's operation and the API."""

from __future__ import annotations

from datetime import timedelta

from tests.apiutil import api, live_server, make_token, seed_tenant
from tickwarden import catalog
from tickwarden.deadlines import DeadlineDetector


def test_an_archived_workflow_keeps_its_runs_readable_and_records_no_missed_ticks(db, clock):
    seed_tenant(db, clock.now(), "acme")
    before = catalog.list_runs(db, "acme", "nightly")
    archived = catalog.archive(db, "acme", "nightly", clock.now())
    assert archived.archived_at == clock.now()
    assert [r.id for r in catalog.list_runs(db, "acme", "nightly")] == [r.id for r in before]
    assert catalog.archive(db, "acme", "nightly", clock.now() + timedelta(hours=1)).archived_at == clock.now()
    DeadlineDetector(db).run_once(clock.now() + timedelta(days=2))
    assert len(catalog.list_runs(db, "acme", "nightly")) == len(before)


def test_the_api_archives_a_workflow_of_the_callers_tenant_only(db, clock):
    seed_tenant(db, clock.now(), "acme")
    seed_tenant(db, clock.now(), "globex")
    acme_token = make_token(db, clock.now(), tenant="acme", name="alice")
    globex_token = make_token(db, clock.now(), tenant="globex", name="gina")
    with live_server(db, clock) as base:
        with api(base, globex_token) as client:
            assert client.post("/api/tenants/acme/workflows/nightly/archive").status_code == 404
        with api(base, acme_token) as client:
            assert client.post("/api/tenants/acme/workflows/nightly/archive").status_code == 200
            assert client.get("/api/workflows").json()["items"] == []
            assert client.get("/api/tenants/acme/workflows/nightly/runs").status_code == 200
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "nightly").archived_at is not None
        assert store.catalog.get_workflow_by_name("globex", "nightly").archived_at is None


FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: export
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 3 * * *"}
    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]
%s
"""


def test_a_workflow_file_archives_with_archived_true_once_and_restores_without_it(db, clock, tmp_path):
    path = tmp_path / "acme.yaml"
    path.write_text(FILE % "")
    catalog.apply_file(db, path, clock.now())
    path.write_text(FILE % "    archived: true")
    archived = catalog.apply_file(db, path, clock.now() + timedelta(minutes=1))
    assert archived.counts["workflow"] == {"created": 0, "updated": 1, "unchanged": 0}
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "export").archived_at == clock.now() + timedelta(minutes=1)
    again = catalog.apply_file(db, path, clock.now() + timedelta(minutes=2))
    assert again.created == 0 and again.updated == 0
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "export").archived_at == clock.now() + timedelta(minutes=1)
    path.write_text(FILE % "")
    restored = catalog.apply_file(db, path, clock.now() + timedelta(minutes=3))
    assert restored.counts["workflow"]["updated"] == 1
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("acme", "export").archived_at is None
