"""Pod environments are listed with their pod's state, by the API (per tenant) and by `tickwarden envs`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.apiutil import api, live_server, make_token, seed_tenant
from tests.dbutil import TEST_URL
from tickwarden import catalog
from tickwarden.clock import isoformat_z

ROOT = Path(__file__).resolve().parents[2]
POD_FILE = ("tenants: [{name: acme}]\nenvironments:\n  - name: etl\n    runtime: kubernetes\n"
            "    image: registry.example/acme/etl:1.0.0\n    resources: {cpu: 250m, memory: 256Mi}\n"
            "    volume: {size: 5Gi}\n")


@pytest.fixture
def fleet(db, clock, tmp_path):
    acme = seed_tenant(db, clock.now(), "acme")
    globex = seed_tenant(db, clock.now(), "globex")
    acme.token = make_token(db, clock.now(), tenant="acme", name="alice")
    globex.token = make_token(db, clock.now(), tenant="globex", name="gina")
    path = tmp_path / "acme.yaml"
    path.write_text(POD_FILE)
    catalog.apply_file(db, path, clock.now())
    with db.transaction() as store:
        etl = store.api.get_environment_by_name("acme", "etl")
    return acme, globex, etl


def test_the_api_shows_a_pod_environments_pod_asleep_then_awake_and_only_to_its_tenant(db, clock, fleet):
    acme, globex, etl = fleet
    with live_server(db, clock) as base:
        with api(base, acme.token) as client:
            listed = {e["name"]: e for e in client.get("/api/environments").json()["items"]}
            assert listed["default"]["runtime"] == "process" and listed["default"]["pod"] is None
            pod = listed["etl"]["pod"]
            assert listed["etl"]["runtime"] == "kubernetes"
            assert pod == {"image": "registry.example/acme/etl:1.0.0", "resources": {"cpu": "250m", "memory": "256Mi"},
                           "volume": {"size": "5Gi"}, "awake": False, "last_used_at": None, "woken_at": None,
                           "stopped_at": None, "wakes": 0}
            # Woken as the worker's wake does: the row locked, then marked awake.
            with db.transaction() as store:
                store.environment_pods.lock(etl.id, etl.tenant_id)
                store.environment_pods.mark_awake(etl.id, clock.now())
            detail = client.get(f"/api/environments/{etl.id}").json()
            assert detail["pod"]["awake"] is True and detail["pod"]["wakes"] == 1
            assert detail["pod"]["woken_at"] == detail["pod"]["last_used_at"] == isoformat_z(clock.now())
        with api(base, globex.token) as client:
            assert [e["name"] for e in client.get("/api/environments").json()["items"]] == ["default"]
            assert client.get(f"/api/environments/{etl.id}").status_code == 404


def test_tickwarden_envs_lists_the_pod_beside_the_processes(db, clock, fleet, schema, tmp_path):
    _, _, etl = fleet
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path), "NO_COLOR": "1"}
    env.pop("TICKWARDEN_SCHEMA", None)

    def envs(*args: str) -> list[dict]:
        done = subprocess.run([str(ROOT / ".venv" / "bin" / "tickwarden"), "envs", "--json", *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert envs() == []  # asleep: not running
    asleep = envs("--all")
    assert [(r["tenant"], r["environment"], r["runtime"], r["status"], r["wakes"]) for r in asleep] == [
        ("acme", "etl", "kubernetes", "asleep", 0)]
    with db.transaction() as store:
        store.environment_pods.lock(etl.id, etl.tenant_id)
        store.environment_pods.mark_awake(etl.id, clock.now())
    awake = envs()
    assert [(r["environment"], r["status"], r["wakes"], r["worker"]) for r in awake] == [("etl", "awake", 1, None)]
