"""The probes of a hostile tenant B, replayed: each is refused and recorded on the attempt,
while B's own secrets work. Runs as root in CI, so the uid drop is exercised for real."""

import hashlib
import os
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL
from tests.execution_helpers import (
    SECRET,
    make_runnable,
    python_step,
    queue_run,
    set_secret,
)
from tickwarden import auth
from tickwarden.worker import Worker

PLATFORM_CANARY = "CANARY-platform-key-5521"
A_CANARY = "CANARY-tenant-a-secret-8812"
B_TOKEN = "b-own-token-3391"


@pytest.fixture
def worker(db, clock, monkeypatch, tmp_path):
    # The worker's own environment holds platform secrets, as in production.
    monkeypatch.setenv("TICKWARDEN_SECRET_KEY", PLATFORM_CANARY)
    monkeypatch.setenv("TICKWARDEN_DATABASE_URL", TEST_URL)
    monkeypatch.setenv("TICKWARDEN_ENVIRONMENTS_DIR", str(tmp_path / "environments"))
    made = Worker(db, "w1", clock=clock, secret_key=SECRET)
    yield made
    made.close(clock.now())


def outcome(db, run_id):
    with db.transaction() as store:
        run = store.ledger.get_run(run_id)
        attempt = store.ledger.list_attempts(run_id)[-1]
        steps = {s.step: s for s in store.api.list_run_steps(run_id) if s.attempt_id == attempt.id}
    return run, attempt, steps


def run_as_b(db, clock, worker, steps, secrets_of_b=None):
    wf = make_runnable(db, clock.now(), steps, tenant="beta", name="probe")
    for name, value in (secrets_of_b or {}).items():
        set_secret(db, wf.tenant_id, name, value, clock.now())
    run = queue_run(db, wf, clock.now(), clock.now())
    worker.run_once(clock.now())
    return outcome(db, run.id)


def test_a_stored_env_reference_to_the_platform_database_is_refused_as_config(db, clock, worker):
    _, attempt, _ = run_as_b(db, clock, worker, [
        {"name": "q", "kind": "sql", "query": "SELECT count(*) FROM runs WHERE tenant_id = 1",
         "database": "env:TICKWARDEN_DATABASE_URL"}])
    assert attempt.error_category == "config" and attempt.retryable is False
    assert "tickwarden secrets set" in attempt.error and TEST_URL not in attempt.error


def test_the_platform_database_given_as_a_tenant_secret_is_refused_after_connecting(db, clock, worker):
    # The same server and database under another spelling of its URL: the check is what the server reports.
    spelled = TEST_URL.replace("127.0.0.1", "127.0.0.1:5432").replace(":5432:5432", ":5432") + "?application_name=x"
    run, attempt, steps = run_as_b(db, clock, worker, [
        {"name": "q", "kind": "sql", "query": "SELECT count(*) FROM runs WHERE tenant_id = 1", "database": "secret:DB"}],
        {"DB": spelled})
    assert attempt.error_category == "auth" and attempt.retryable is False and run.status == "failed"
    assert "platform database of tickwarden" in attempt.error and steps["q"].output is None


def test_a_tenants_own_database_runs_through_its_secret(db, clock, worker, tenant_database):
    _, attempt, steps = run_as_b(db, clock, worker, [
        {"name": "q", "kind": "sql", "query": "SELECT 1 UNION ALL SELECT 2", "database": "secret:DB"}],
        {"DB": tenant_database})
    assert attempt.status == "succeeded" and steps["q"].output == {"rows": 2, "columns": ["?column?"]}


def test_a_python_step_reaches_nothing_of_the_worker_but_its_declared_secret(db, clock, worker):
    data_dir = Path(tempfile.mkdtemp(prefix="tw-data-"))
    try:
        key_file = data_dir / auth.KEY_FILE
        key_file.write_text(PLATFORM_CANARY)
        key_file.chmod(0o600)
        (data_dir / "notes").write_text(PLATFORM_CANARY)
        (data_dir / "notes").chmod(0o644)  # readable by anyone who can enter the directory
        a = make_runnable(db, clock.now(), [python_step("noop", "noop")], tenant="acme")
        set_secret(db, a.tenant_id, "API_TOKEN", A_CANARY, clock.now())
        _, attempt, steps = run_as_b(db, clock, worker, [
            {**python_step("probe", "probe_platform", params={
                "worker_pid": os.getpid(), "key_file": str(key_file), "data_file": str(data_dir / "notes"),
                "data_dir": str(data_dir)}), "secrets": ["secret:API_TOKEN"]}], {"API_TOKEN": B_TOKEN})
    finally:
        for child in data_dir.iterdir():
            child.unlink()
        data_dir.rmdir()
    assert attempt.status == "succeeded", attempt.error
    got = steps["probe"].output
    assert set(got["environ"]) == {"PATH", "HOME", "LANG", "TMPDIR", "TICKWARDEN_TENANT_ID", "API_TOKEN",
                                   "TICKWARDEN_TENANT", "TICKWARDEN_WORKFLOW", "TICKWARDEN_SCHEDULED_FOR",
                                   "TICKWARDEN_ATTEMPT", "TICKWARDEN_RUN_KEY", "TICKWARDEN_RUN_CREDENTIAL"}
    # its own secret arrived (the digest says so), and is not stored in the clear on the way out
    assert got["environ"]["API_TOKEN"] in ("[secret]", "[redacted]")
    assert got["declared_digest"] == hashlib.sha256(B_TOKEN.encode()).hexdigest()[:12]
    for probe in ("proc_environ", "key_file", "data_file", "data_dir"):
        assert got[probe] == "refused: PermissionError", probe
    assert got["uid"] != 0 and got["cwd"] != os.getcwd()
    with db.connection() as conn:
        dump = str(conn.execute("SELECT * FROM attempt_steps").fetchall())
        dump += str(conn.execute("SELECT * FROM attempts").fetchall())
    for canary in (PLATFORM_CANARY, A_CANARY, B_TOKEN, TEST_URL):
        assert canary not in dump


def test_the_step_gets_a_run_key_and_a_signed_credential_naming_tenant_and_publisher(db, clock, worker):
    _, attempt, steps = run_as_b(db, clock, worker, [python_step("key", "run_key")])
    assert attempt.status == "succeeded"
    got = steps["key"].output
    assert got["TICKWARDEN_RUN_KEY"] == f"beta/probe/{clock.now().strftime('%Y-%m-%dT%H:%M:%SZ')}"
    assert got["TICKWARDEN_ATTEMPT"] == "1"
    claims = auth.verify_run_credential("".join(got["chars"]), clock.now(), SECRET)
    assert claims == {"tenant": "beta", "workflow": "probe", "publisher": "owner@beta.test",
                      "scheduled_for": clock.now().strftime("%Y-%m-%dT%H:%M:%SZ"), "attempt": 1}
    with pytest.raises(auth.AuthError, match="expired"):
        auth.verify_run_credential("".join(got["chars"]), clock.now() + timedelta(minutes=10), SECRET)


def test_the_example_import_applies_once_per_tick_however_often_it_is_retried(db, clock, worker, tenant_database):
    import psycopg

    from tickwarden.poller import OutcomePoller

    steps = [{"name": "import", "kind": "python", "call": "tickwarden.examples_steps:idempotent_import",
              "params": {"rows": 5, "database": "WAREHOUSE_URL"}, "secrets": ["secret:WAREHOUSE_URL"]},
             # a later step fails, so the whole tick is retried and the import runs again
             python_step("publish", "fail", depends_on=["import"])]
    wf = make_runnable(db, clock.now(), steps, tenant="beta", name="import")
    set_secret(db, wf.tenant_id, "WAREHOUSE_URL", tenant_database, clock.now())
    run = queue_run(db, wf, clock.now(), clock.now(), budget=1)
    worker.run_once(clock.now())
    _, first, first_steps = outcome(db, run.id)
    assert first.number == 1 and first_steps["import"].output == {"imported": 5}
    OutcomePoller(db, "p1").run_once(clock.now())  # queues the retry of the same tick
    worker.run_once(clock.now())
    _, second, second_steps = outcome(db, run.id)
    assert second.number == 2 and second_steps["import"].output["imported"] == 0
    with psycopg.connect(tenant_database) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT run_key) FROM readings").fetchone() == (5, 1)
