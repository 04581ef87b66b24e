"""The ping URL over HTTP: no token, an unguessable key, bounded and sanitized bodies, a per-key rate limit."""

from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import publish
from tests.apiutil import api, live_server, make_token
from tickwarden import checkins
from tickwarden.db import Database

TICK = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


def external(db: Database, now: datetime, tenant: str, name: str = "export") -> int:
    with db.transaction() as store:
        t = store.catalog.upsert_tenant(tenant, now)
        return publish(store, t.id, name, now, kind="external").id


@pytest.fixture
def server(db, clock):
    with live_server(db, clock) as base:
        yield base


@pytest.fixture
def keys(db, clock):
    """Two tenants, each with an external workflow named `export`, and their ping keys; the clock after the tick."""
    ids = {tenant: external(db, clock.now(), tenant) for tenant in ("acme", "beta")}
    issued = {tenant: checkins.issue_key(db, tenant, "export", clock.now()).key for tenant in ids}
    clock.set(TICK + timedelta(minutes=1))
    return ids, issued


def runs_of(db, workflow_id):
    with db.transaction() as store:
        return store.ledger.list_runs(workflow_id)


def test_a_report_needs_no_token_and_records_the_tick(server, keys, db):
    ids, issued = keys
    with api(server, None) as client:
        started = client.post(f"/ping/{issued['acme']}/start")
        assert started.status_code == 200, started.text
        assert started.json()["tick"] == "2026-11-30T02:00:00Z" and started.json()["run_status"] == "running"
        done = client.post(f"/ping/{issued['acme']}/success", params={"exit_code": 0})
        assert done.json()["run_status"] == "succeeded"
    assert [r.status for r in runs_of(db, ids["acme"])] == ["succeeded"]


def test_an_unknown_or_malformed_key_is_a_404_that_reveals_nothing(server, keys, db):
    ids, issued = keys
    with api(server, None) as client:
        answers = [client.post(f"/ping/{key}/start") for key in
                   (checkins.new_key(), "short", issued["acme"][:-1] + ("A" if issued["acme"][-1] != "A" else "B"))]
    assert {a.status_code for a in answers} == {404}
    assert {a.json()["detail"] for a in answers} == {checkins.UNKNOWN_KEY}
    assert runs_of(db, ids["acme"]) == []


def test_an_unknown_status_is_refused_before_the_key_is_looked_up(server, keys):
    _, issued = keys
    with api(server, None) as client:
        answer = client.post(f"/ping/{issued['acme']}/done")
    assert answer.status_code == 404 and "start" in answer.json()["detail"]


def test_an_oversized_log_is_refused_and_nothing_is_recorded(server, keys, db):
    ids, issued = keys
    with api(server, None) as client:
        answer = client.post(f"/ping/{issued['acme']}/fail", content=b"x" * (checkins.MAX_LOG_BYTES + 1))
    assert answer.status_code == 413
    assert runs_of(db, ids["acme"]) == []


def test_the_log_is_sanitized_and_bounded(server, keys, db):
    ids, issued = keys
    log = "\n".join(f"line {i}" for i in range(100)) + "\nconnecting with password=hunter2 as ops@acme.test\nboom"
    with api(server, None) as client:
        answer = client.post(f"/ping/{issued['acme']}/fail", params={"exit_code": 2}, content=log.encode())
    assert answer.status_code == 200, answer.text
    assert "hunter2" not in answer.text
    [run] = runs_of(db, ids["acme"])
    assert run.status == "failed" and "exit code 2" in run.error
    with db.transaction() as store:
        [attempt] = store.ledger.list_attempts(run.id)
    assert "hunter2" not in attempt.log_tail and "ops@acme.test" not in attempt.log_tail
    assert attempt.log_tail.endswith("boom") and "line 0\n" not in attempt.log_tail  # the tail only


def test_bad_query_values_are_one_sentence(server, keys):
    _, issued = keys
    with api(server, None) as client:
        not_a_time = client.post(f"/ping/{issued['acme']}/start", params={"tick": "yesterday"})
        not_a_tick = client.post(f"/ping/{issued['acme']}/start", params={"tick": "2026-11-30T01:33:00Z"})
        negative = client.post(f"/ping/{issued['acme']}/fail", params={"exit_code": -1})
    assert (not_a_time.status_code, not_a_tick.status_code, negative.status_code) == (422, 422, 422)
    assert "ISO 8601" in not_a_time.json()["detail"] and "not a tick" in not_a_tick.json()["detail"]


def test_each_key_is_rate_limited_and_the_window_passes(server, keys, clock):
    _, issued = keys
    with api(server, None) as client:
        answers = [client.post(f"/ping/{issued['acme']}/start").status_code for _ in range(checkins.RATE_LIMIT)]
        assert set(answers) == {200}
        limited = client.post(f"/ping/{issued['acme']}/start")
        assert limited.status_code == 429 and 1 <= int(limited.headers["Retry-After"]) <= 60
        # another key has its own window
        assert client.post(f"/ping/{issued['beta']}/start").status_code == 200
        clock.set(clock.now() + checkins.RATE_WINDOW)
        assert client.post(f"/ping/{issued['acme']}/start").status_code == 200


def test_a_tenant_cannot_report_for_or_issue_the_url_of_another_tenants_workflow(server, keys, db, clock):
    ids, issued = keys
    beta = make_token(db, clock.now(), tenant="beta", name="bob")
    with api(server, None) as client:
        # beta's key names beta's workflow only, whatever it sends
        assert client.post(f"/ping/{issued['beta']}/fail", params={"tick": TICK.isoformat()}).status_code == 200
    assert runs_of(db, ids["acme"]) == [] and [r.status for r in runs_of(db, ids["beta"])] == ["failed"]
    with api(server, beta) as client:
        other = client.post("/api/tenants/acme/workflows/export/checkin-url", params={"rotate": "true"})
        assert other.status_code == 404
        own = client.post("/api/tenants/beta/workflows/export/checkin-url", params={"rotate": "true"})
        assert own.status_code == 201 and own.json()["replaced"] is True
    with api(server, None) as client:
        # acme's URL still works; beta's old one does not, its new one does
        assert client.post(f"/ping/{issued['acme']}/start").status_code == 200
        assert client.post(f"/ping/{issued['beta']}/start").status_code == 404
        # the new key reaches beta's workflow, whose tick already failed: refused as late, not unknown
        assert client.post(f"{own.json()['path']}/start").status_code == 409


def test_issuing_a_url_for_a_managed_workflow_is_a_conflict(server, db, clock):
    from tests.helpers import make_workflow

    make_workflow(db, clock.now(), tenant="acme", name="nightly")
    token = make_token(db, clock.now(), tenant="acme")
    with api(server, token) as client:
        answer = client.post("/api/tenants/acme/workflows/nightly/checkin-url")
    assert answer.status_code == 409 and "kind external" in answer.json()["detail"]


def test_publishing_over_the_api_takes_kind_external_without_steps(server, db, clock):
    from tests.apiutil import seed_tenant

    seed_tenant(db, clock.now(), "gamma")
    token = make_token(db, clock.now(), tenant="gamma")
    body = {"environment": "default", "publisher": "ops@gamma.test", "schedule": {"cron": "0 3 * * *"},
            "kind": "external"}
    step = {"name": "load", "kind": "python", "call": "tickwarden.examples_steps:noop"}
    with api(server, token) as client:
        created = client.put("/api/tenants/gamma/workflows/export", json=body)
        assert created.status_code == 201, created.text
        with_steps = client.put("/api/tenants/gamma/workflows/export", json={**body, "steps": [step]})
        assert with_steps.status_code == 422 and "external workflow has no steps" in with_steps.json()["detail"]
        managed = client.put("/api/tenants/gamma/workflows/other", json={**body, "kind": "managed"})
        assert managed.status_code == 422 and "at least one step" in managed.json()["detail"]
        issued = client.post("/api/tenants/gamma/workflows/export/checkin-url")
        assert issued.status_code == 201 and issued.json()["path"].startswith("/ping/")
    with db.transaction() as store:
        assert store.catalog.get_workflow_by_name("gamma", "export").kind == "external"
