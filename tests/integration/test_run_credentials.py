"""A tenant's service checks the run credential a step presents, through the API.

The credential is what a step can show another system to prove it is a run of its tenant;
the tenant's service asks tickwarden with its own API token. Everything a caller can send is
treated as an attacker's: forged, stale, replayed after the attempt, or another tenant's.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.apiutil import api, live_server, make_token, seed_tenant
from tests.helpers import create_run, lease
from tickwarden import auth
from tickwarden.models import AttemptOutcome

KEY = "run-credential-platform-key-current"
OLD_KEY = "run-credential-platform-key-previous"


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv(auth.SECRET_ENV, KEY)
    monkeypatch.setenv("TICKWARDEN_SECRET_KEYS_OLD", OLD_KEY)


@pytest.fixture
def running(db, clock, keys):
    """acme's nightly workflow with one attempt running now, and globex beside it."""
    acme = seed_tenant(db, clock.now(), "acme")
    globex = seed_tenant(db, clock.now(), "globex")
    acme.token = make_token(db, clock.now(), tenant="acme", name="svc")
    globex.token = make_token(db, clock.now(), tenant="globex", name="svc")
    with db.transaction() as store:
        workflow = store.catalog.get_workflow(acme.workflow_id)
    tick = clock.now().replace(second=0, microsecond=0)
    run = create_run(db, workflow, tick, clock.now(), budget=0)
    with db.transaction() as store:
        attempt = lease(store, "w-creds", clock.now(), 60)[0]
    assert attempt.run_id == run.id
    return acme, globex, run, attempt, tick


def credential(tick, *, tenant="acme", workflow="nightly", attempt=1, now, key=KEY):
    run_key = auth.RunKey(tenant=tenant, workflow=workflow, scheduled_for=tick, attempt=attempt,
                          publisher="ops@acme.test")
    return auth.issue_run_credential(run_key, now, key)


@pytest.fixture
def server(db, clock, keys):
    with live_server(db, clock) as base:
        yield base


def verify(server, token, presented):
    response = api(server, token).post("/api/run-credentials/verify", json={"credential": presented})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_running_attempts_credential_is_valid_and_names_its_run(server, running, clock):
    acme, _, run, _, tick = running
    body = verify(server, acme.token, credential(tick, now=clock.now()))
    assert body["valid"] is True and body["reason"] is None
    assert (body["tenant"], body["workflow"], body["attempt"], body["run_id"]) == ("acme", "nightly", 1, run.id)
    assert body["publisher"] == "ops@acme.test"


def test_a_credential_is_refused_once_its_attempt_has_ended(server, running, clock, db):
    acme, _, _, attempt, tick = running
    presented = credential(tick, now=clock.now())
    with db.transaction() as store:
        store.ledger.finish_attempt(attempt, "w-creds", AttemptOutcome(status="succeeded"), clock.now())
    body = verify(server, acme.token, presented)
    assert body == {**body, "valid": False, "reason": "The attempt this run credential was issued to has ended.",
                    "run_id": None, "tenant": None}


def test_an_expired_forged_or_altered_credential_is_refused(server, running, clock):
    acme, _, _, _, tick = running
    stale = credential(tick, now=clock.now() - timedelta(minutes=6))
    assert verify(server, acme.token, stale)["reason"] == "The run credential has expired."
    forged = credential(tick, now=clock.now(), key="an-attackers-guess")
    assert verify(server, acme.token, forged)["reason"] == "The run credential is not validly signed."
    genuine = credential(tick, now=clock.now())
    payload, stamp, signature = genuine.rsplit(".", 2)
    altered = payload.replace("acme", "acmf") + "." + stamp + "." + signature
    for bad in (altered, "not-a-credential", "." * 300, genuine[:-2]):
        body = verify(server, acme.token, bad)
        assert body["valid"] is False and body["reason"] == "The run credential is not validly signed.", bad


def test_a_credential_signed_with_the_previous_platform_key_is_accepted_while_it_rotates(server, running, clock):
    acme, _, run, _, tick = running
    body = verify(server, acme.token, credential(tick, now=clock.now(), key=OLD_KEY))
    assert body["valid"] is True and body["run_id"] == run.id


def test_another_tenants_credential_reads_as_not_ours_and_tells_nothing_of_their_runs(server, running, clock):
    acme, globex, _, _, tick = running
    body = verify(server, globex.token, credential(tick, now=clock.now()))
    assert body == {"valid": False, "reason": "The run credential was not issued to a run of your tenant.",
                    "tenant": None, "workflow": None, "publisher": None, "scheduled_for": None,
                    "attempt": None, "run_id": None}
    # a genuinely signed credential naming a workflow, tick or attempt that does not exist
    for fake in (credential(tick, workflow="ghost", now=clock.now()),
                 credential(tick - timedelta(hours=5), now=clock.now()),
                 credential(tick, attempt=2, now=clock.now())):
        assert verify(server, acme.token, fake)["reason"] == \
            "The run credential was not issued to a run of your tenant."


def test_the_route_wants_a_token_and_one_credential(server, running, clock):
    acme, _, _, _, tick = running
    anonymous = api(server, None).post("/api/run-credentials/verify",
                                       json={"credential": credential(tick, now=clock.now())})
    assert anonymous.status_code == 401
    for bad in ({}, {"credential": ""}, {"credential": "x" * 5000}, {"credential": "a", "tenant": "acme"}):
        response = api(server, acme.token).post("/api/run-credentials/verify", json=bad)
        assert response.status_code == 422, (bad, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
