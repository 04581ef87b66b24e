"""The secrets API: a member sets its own tenant's secrets, never reads a value back,
and cannot publish a step that names the platform's variables."""

import json

import pytest

from tests.apiutil import api, live_server, make_token, seed_tenant
from tickwarden import secrets
from tickwarden.recipes import parse_recipe

CANARY = "CANARY-api-secret-4410"


@pytest.fixture
def server(db, clock, monkeypatch):
    monkeypatch.setenv("TICKWARDEN_SECRET_KEY", "api-test-key")
    with live_server(db, clock) as base:
        yield base


@pytest.fixture
def tokens(db, clock):
    seed_tenant(db, clock.now(), "acme")
    seed_tenant(db, clock.now(), "beta")
    return make_token(db, clock.now(), tenant="acme", name="alice"), make_token(db, clock.now(), tenant="beta",
                                                                                name="bob")


def test_a_member_sets_and_lists_its_secrets_without_ever_reading_a_value(server, tokens, db):
    _, bob = tokens
    with api(server, bob) as client:
        stored = client.put("/api/tenants/beta/secrets/WAREHOUSE", json={"value": CANARY})
        assert stored.status_code == 200, stored.text
        assert stored.json()["reference"] == "secret:WAREHOUSE"
        listed = client.get("/api/tenants/beta/secrets")
        assert [s["name"] for s in listed.json()] == ["WAREHOUSE"]
        assert CANARY not in stored.text + listed.text
        assert client.delete("/api/tenants/beta/secrets/WAREHOUSE").status_code == 204
        assert client.delete("/api/tenants/beta/secrets/WAREHOUSE").status_code == 404


def test_the_stored_value_opens_with_the_platform_key_only(server, tokens, db):
    _, bob = tokens
    with api(server, bob) as client:
        assert client.put("/api/tenants/beta/secrets/WAREHOUSE", json={"value": CANARY}).status_code == 200
    with db.transaction() as store:
        tenant = store.catalog.get_tenant_by_name("beta")
        (sealed,) = store.secrets.sealed_secrets(tenant.id, ["WAREHOUSE"])
    assert secrets.Keyring("api-test-key").open(sealed) == CANARY


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"value": ""}, 422, "The secret value is empty."),
    ({"value": "x" * 70000}, 413, ""),  # the API body limit stops it before the secret store would
    ({"value": CANARY, "extra": 1}, 422, ""),
    ({}, 422, ""),
    ({"value": CANARY + "\ud800"}, 422, "The secret value contains a lone surrogate"),  # was a 500
    ({"value": CANARY + "\x00"}, 422, "The secret value contains a NUL character."),
])
def test_bad_values_are_one_sentence_that_never_echoes_the_value(server, tokens, body, status, says):
    _, bob = tokens
    with api(server, bob) as client:
        # sent as JSON escapes (ASCII), as an attacker would: a lone surrogate has no UTF-8 form
        answer = client.put("/api/tenants/beta/secrets/WAREHOUSE", content=json.dumps(body),
                            headers={"content-type": "application/json"})
    assert answer.status_code == status and says in answer.text
    assert CANARY not in answer.text and "x" * 100 not in answer.text


def test_another_tenants_secrets_do_not_exist_for_a_member(server, tokens):
    alice, _ = tokens
    with api(server, alice) as client:
        assert client.put("/api/tenants/beta/secrets/WAREHOUSE", json={"value": CANARY}).status_code == 404
        assert client.get("/api/tenants/beta/secrets").status_code == 404


def test_publishing_a_step_on_the_platform_database_variable_is_refused(server, tokens, db):
    _, bob = tokens
    body = {"environment": "default", "publisher": "ops@beta.test", "schedule": {"cron": "0 3 * * *"},
            "steps": [{"name": "probe", "kind": "sql", "query": "SELECT count(*) FROM runs WHERE tenant_id = 1",
                       "database": "env:TICKWARDEN_DATABASE_URL"}]}
    with api(server, bob) as client:
        refused = client.put("/api/tenants/beta/workflows/probe", json=body)
        assert refused.status_code == 422
        assert "tickwarden secrets set TENANT TICKWARDEN_DATABASE_URL" in refused.json()["detail"]
        body["steps"][0]["database"] = "secret:WAREHOUSE"
        accepted = client.put("/api/tenants/beta/workflows/probe", json=body)
        assert accepted.status_code == 201, accepted.text  # created
    with db.transaction() as store:
        stored = store.catalog.get_workflow_by_name("beta", "probe")
    assert parse_recipe(stored.recipe).steps[0].database == "secret:WAREHOUSE"
