import time
from datetime import timedelta

import pytest

from tests.helpers import lease
from tests.dbutil import TEST_URL
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run, set_secret
from tickwarden.db import Database
from tickwarden.models import AttemptOutcome
from tickwarden.worker import Result, Worker


@pytest.fixture
def workers(db, clock):
    made = []

    def make(worker_id="w1", **kwargs):
        worker = Worker(db, worker_id, clock=clock, secret_key=SECRET, **kwargs)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.environments.close(clock.now())


def outcome(db, run_id):
    with db.transaction() as store:
        run = store.ledger.get_run(run_id)
        attempts = store.ledger.list_attempts(run_id)
        steps = [s for s in store.api.list_run_steps(run_id) if s.attempt_id == attempts[-1].id]
    return run, attempts[-1], {s.step: s for s in steps}


def test_it_runs_a_two_step_graph_and_outputs_flow_downstream(db, clock, workers):
    wf = make_runnable(db, clock.now(), [
        python_step("second", "double", depends_on=["first"]),
        python_step("first", "number", params={"value": 21}),
    ])
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, steps = outcome(db, run.id)
    assert run.status == "succeeded" and attempt.status == "succeeded"
    assert [s.step for s in sorted(steps.values(), key=lambda s: s.position)] == ["first", "second"]
    assert steps["second"].output == {"value": 42}
    assert attempt.outputs == {"first": {"value": 21}, "second": {"value": 42}}
    assert "producing 21" in steps["first"].log and "doubling" in steps["second"].log


def test_a_workflow_that_does_not_ask_keeps_no_outputs_but_its_rows_still_count(db, clock, workers):
    wf = make_runnable(db, clock.now(), [
        python_step("second", "double", depends_on=["first"]),
        python_step("first", "number", params={"value": 21}),
    ], keep_outputs=False)
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, steps = outcome(db, run.id)
    assert run.status == "succeeded", "outputs still flow to the steps that depend on them"
    assert attempt.outputs == {} and all(s.output is None for s in steps.values())


def test_a_failing_step_stops_its_dependants_and_is_named(db, clock, workers):
    wf = make_runnable(db, clock.now(), [
        python_step("extract", "fail"),
        python_step("load", "noop", depends_on=["extract"]),
        python_step("report", "noop", depends_on=["load"]),
        python_step("independent", "noop"),
    ])
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, steps = outcome(db, run.id)
    assert run.status == "pending_retry" and run.failed_step == "extract"
    assert attempt.error_category == "step_error" and attempt.retryable
    assert "ValueError" in attempt.error and "extract" in attempt.error
    assert {k: s.status for k, s in steps.items()} == {
        "extract": "failed", "load": "skipped", "report": "skipped", "independent": "succeeded"}
    assert "about to fail" in steps["extract"].log


def test_the_watchdog_stops_a_hanging_step_at_its_timeout(db, clock, workers):
    wf = make_runnable(db, clock.now(), [
        python_step("stuck", "hang", timeout=1),
        python_step("after", "noop", depends_on=["stuck"]),
    ])
    run = queue_run(db, wf, clock.now(), clock.now())
    worker = workers()
    started = time.monotonic()
    worker.run_once(clock.now())
    elapsed = time.monotonic() - started
    run, attempt, steps = outcome(db, run.id)
    assert 1 <= elapsed < 5
    assert attempt.error_category == "timeout" and attempt.failed_step == "stuck"
    assert steps["stuck"].status == "timeout" and steps["after"].status == "skipped"
    with db.transaction() as store:
        instances = store.execution.list_environment_instances(include_stopped=True)
    assert [i.status for i in instances] == ["dead"]
    assert not worker.environments.live()


def test_the_workflow_timeout_bounds_the_whole_graph(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("stuck", "hang")], timeout=1)
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, _ = outcome(db, run.id)
    assert attempt.error_category == "timeout" and "workflow exceeded its timeout of 1 s" in attempt.error


def test_a_deactivated_publisher_is_a_permanent_auth_failure(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("first", "noop")], publisher_active=False)
    run = queue_run(db, wf, clock.now(), clock.now(), budget=3)
    worker = workers()
    worker.run_once(clock.now())
    run, attempt, steps = outcome(db, run.id)
    assert attempt.error_category == "auth" and attempt.retryable is False
    assert run.status == "failed" and steps["first"].status == "skipped"
    assert not worker.environments.live()  # nothing was woken for a run that may not execute


def test_a_workflow_without_publisher_is_an_auth_failure(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("first", "noop")], with_publisher=False)
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, _ = outcome(db, run.id)
    assert attempt.error_category == "auth" and run.status == "failed"


def test_a_malformed_stored_recipe_is_a_config_failure(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("a", "noop", depends_on=["b"]),
                                         python_step("b", "noop", depends_on=["a"])])
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, _ = outcome(db, run.id)
    assert attempt.error_category == "config" and not attempt.retryable and "cycle" in attempt.error


def test_an_unimportable_call_is_a_config_failure(db, clock, workers):
    wf = make_runnable(db, clock.now(), [{"name": "a", "kind": "python", "call": "tests.nowhere:fn"}])
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, _ = outcome(db, run.id)
    assert attempt.error_category == "config" and run.status == "failed" and attempt.failed_step == "a"


def test_a_sql_step_runs_through_a_secret_reference_that_never_leaks(db, clock, workers, tenant_database):
    canary_password = "canary-pw-7f3a9c"
    url = tenant_database.replace("postgres@", f"postgres:{canary_password}@")
    wf = make_runnable(db, clock.now(), [
        {"name": "count", "kind": "sql", "query": "SELECT 1 AS id, 'acme' AS name, 'Acme' AS display_name",
         "database": "secret:TENANT_DB"},
        {"name": "broken", "kind": "sql", "query": "SELECT nope FROM pg_class", "database": "secret:TENANT_DB"},
    ])
    set_secret(db, wf.tenant_id, "TENANT_DB", url, clock.now())
    run = queue_run(db, wf, clock.now(), clock.now())
    workers(environ={}).run_once(clock.now())
    run, attempt, steps = outcome(db, run.id)
    assert steps["count"].status == "succeeded"
    assert steps["count"].output == {"rows": 1, "columns": ["id", "name", "display_name"]}
    assert steps["broken"].status == "failed" and attempt.failed_step == "broken"
    with db.connection() as conn:
        dump = str(conn.execute("SELECT a.*, r.* FROM attempts a JOIN runs r ON r.id = a.run_id").fetchall())
        dump += str(conn.execute("SELECT * FROM attempt_steps").fetchall())
        dump += str(conn.execute("SELECT * FROM tenant_secrets").fetchall())
    assert canary_password not in dump and url not in dump and "acme" not in str(steps["count"].output)


def test_a_missing_secret_is_a_config_failure_naming_only_the_reference(db, clock, workers):
    wf = make_runnable(db, clock.now(), [{"name": "q", "kind": "sql", "query": "SELECT 1", "database": "secret:NOPE"}])
    run = queue_run(db, wf, clock.now(), clock.now())
    workers(environ={}).run_once(clock.now())
    run, attempt, _ = outcome(db, run.id)
    assert attempt.error_category == "config" and "no secret named NOPE" in attempt.error and not attempt.retryable


def test_the_environment_stays_warm_across_runs_and_stops_when_idle(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("who", "pid")], idle_timeout=60)
    worker = workers()
    pids = []
    for _minute in range(3):
        run = queue_run(db, wf, clock.now(), clock.now())
        worker.run_once(clock.now())
        pids.append(outcome(db, run.id)[2]["who"].output["pid"])
        clock.advance(30)
    assert len(set(pids)) == 1
    with db.transaction() as store:
        [instance] = store.execution.list_environment_instances()
    assert instance.status == "warm" and instance.runs_served == 3 and instance.pid == pids[0]
    process = worker.environments.live()[0].process
    worker.run_once(clock.advance(61))
    assert not process.alive() and not worker.environments.live()
    with db.transaction() as store:
        assert [i.status for i in store.execution.list_environment_instances(include_stopped=True)] == ["stopped"]


def test_a_dead_environment_is_restarted_on_the_next_run(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("who", "pid")])
    worker = workers()
    first = queue_run(db, wf, clock.now(), clock.now())
    worker.run_once(clock.now())
    worker.environments.live()[0].process.kill()
    second = queue_run(db, wf, clock.now() + timedelta(days=1), clock.now())
    worker.run_once(clock.now())
    a, b = (outcome(db, r.id)[2]["who"].output["pid"] for r in (first, second))
    assert a != b
    with db.transaction() as store:
        assert sorted(i.status for i in store.execution.list_environment_instances(include_stopped=True)) == ["dead", "warm"]


def test_a_step_that_kills_its_environment_is_an_environment_failure(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("boom", "die")])
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, _ = outcome(db, run.id)
    assert attempt.error_category == "environment" and attempt.retryable and run.status == "pending_retry"


def test_tenants_never_share_a_process(db, clock, workers):
    acme = make_runnable(db, clock.now(), [python_step("who", "pid")], tenant="acme")
    globex = make_runnable(db, clock.now(), [python_step("who", "pid")], tenant="globex")
    worker = workers()
    runs = [queue_run(db, wf, clock.now() - timedelta(days=i), clock.now()) for i, wf in enumerate((acme, globex, acme))]
    for _ in runs:
        worker.run_once(clock.now())
    pids = [outcome(db, r.id)[2]["who"].output["pid"] for r in runs]
    assert pids[0] == pids[2] != pids[1]
    tenants = {i.tenant_id: i.process.tenant_id for i in worker.environments.live()}
    assert tenants == {acme.tenant_id: acme.tenant_id, globex.tenant_id: globex.tenant_id}


def test_an_environment_refuses_another_tenant(db, clock, workers):
    from tickwarden.environments import IsolationError

    acme = make_runnable(db, clock.now(), [python_step("who", "pid")], tenant="acme")
    with db.transaction() as store:
        env = store.api.get_environment(acme.environment_id).environment
    with pytest.raises(IsolationError):
        workers().environments.acquire(env, acme.tenant_id + 1, clock.now())


def test_a_result_delivered_twice_is_applied_once(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("first", "number", params={"value": 1})])
    run = queue_run(db, wf, clock.now(), clock.now())
    worker = workers()
    with db.transaction() as store:
        [attempt] = lease(store, "w1", clock.now(), 30)
    first = worker.execute(attempt)
    again = worker.record(attempt, Result(AttemptOutcome(status="failed", error_category="step_error", error="late")))
    run, attempt, steps = outcome(db, run.id)
    assert first.applied and not again.applied
    assert run.status == "succeeded" and attempt.status == "succeeded" and list(steps) == ["first"]


def test_a_lost_lease_abandons_the_result(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("stuck", "hang", params={"seconds": 5})])
    run = queue_run(db, wf, clock.now(), clock.now())
    worker = workers(lease_seconds=0.6)
    with db.transaction() as store:
        [attempt] = lease(store, "w1", clock.now(), 0.6)
        # another party (the reaper) decides the lease is gone
        store.ledger.expire_leases(clock.now() + timedelta(seconds=1))
    started = time.monotonic()
    assert worker.execute(attempt) is None
    assert time.monotonic() - started < 3
    run, attempt, steps = outcome(db, run.id)
    assert attempt.status == "lost" and steps == {}


def test_concurrent_workers_never_lease_the_same_attempt(db, clock, workers):
    import threading

    wf = make_runnable(db, clock.now(), [python_step("first", "noop")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=i), clock.now()) for i in range(12)]
    pool = [workers(f"w{i}") for i in range(3)]
    executed: list[tuple[str, int]] = []
    original = Worker.execute

    def spy(self, attempt, *rest, **keywords):
        executed.append((self.worker_id, attempt.id))
        return original(self, attempt, *rest, **keywords)

    Worker.execute = spy
    try:
        def drain(worker):
            while worker.run_once(clock.now()) <= clock.now():
                pass

        threads = [threading.Thread(target=drain, args=(w,)) for w in pool]
        [t.start() for t in threads]
        [t.join() for t in threads]
    finally:
        Worker.execute = original
    attempt_ids = [a for _, a in executed]
    assert len(attempt_ids) == len(set(attempt_ids)) == 12
    assert all(outcome(db, r.id)[0].status == "succeeded" for r in runs)


def test_environment_processes_do_not_inherit_the_workers_secrets(db, clock, workers, monkeypatch):
    monkeypatch.setenv("TICKWARDEN_DATABASE_URL", "postgresql://platform:hunter22@db/platform")
    monkeypatch.setenv("TENANT_DB", "postgresql://acme:acme-pass@db/acme")
    wf = make_runnable(db, clock.now(), [python_step("env", "environ")])
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    names = outcome(db, run.id)[2]["env"].output
    assert "TICKWARDEN_DATABASE_URL" not in names and "TENANT_DB" not in names
    assert "TICKWARDEN_TENANT_ID" in names and "PATH" in names


def test_a_bug_in_the_worker_is_recorded_as_internal_instead_of_waiting_for_the_reaper(db, clock, workers,
                                                                                       monkeypatch):
    import tickwarden.worker as worker_module

    def broken(raw):
        raise RuntimeError("unexpected")

    monkeypatch.setattr(worker_module, "parse_recipe", broken)
    wf = make_runnable(db, clock.now(), [python_step("first", "noop")])
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, _ = outcome(db, run.id)
    assert attempt.status == "failed" and attempt.error_category == "internal" and run.status == "pending_retry"


def test_a_slow_sql_step_is_stopped_at_its_timeout_on_the_server_too(db, clock, workers, tenant_database):
    wf = make_runnable(db, clock.now(), [
        {"name": "slow", "kind": "sql", "query": "SELECT pg_sleep(30)", "database": "secret:TENANT_DB",
         "timeout_seconds": 1},
        {"name": "after", "kind": "sql", "query": "SELECT 1", "database": "secret:TENANT_DB", "depends_on": ["slow"]},
    ])
    set_secret(db, wf.tenant_id, "TENANT_DB", tenant_database, clock.now())
    run = queue_run(db, wf, clock.now(), clock.now())
    started = time.monotonic()
    workers(environ={}).run_once(clock.now())
    assert time.monotonic() - started < 5
    run, attempt, steps = outcome(db, run.id)
    assert attempt.error_category == "timeout" and attempt.failed_step == "slow"
    assert steps["slow"].status == "timeout" and steps["after"].status == "skipped"

    def sleeping():
        with db.connection() as conn:
            return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'"
                                " AND state = 'active'").fetchone()[0]

    deadline = time.monotonic() + 2
    while sleeping() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleeping() == 0



def test_a_worker_keeps_at_most_max_live_environments_warm(db, clock, workers):
    from tickwarden.environments import EnvironmentPool

    acme = make_runnable(db, clock.now(), [python_step("who", "pid")], tenant="acme")
    globex = make_runnable(db, clock.now(), [python_step("who", "pid")], tenant="globex")
    worker = workers(environments=EnvironmentPool(db, "w1", max_live=1))
    for i, wf in enumerate((acme, globex)):
        queue_run(db, wf, clock.now() - timedelta(days=i), clock.now())
        worker.run_once(clock.advance(1))
    assert [i.tenant_id for i in worker.environments.live()] == [globex.tenant_id]
    with db.transaction() as store:
        statuses = {i.tenant: i.status for i in store.execution.list_environment_instances(include_stopped=True)}
    assert statuses == {"acme": "stopped", "globex": "warm"}


def test_pooled_connections_come_back_with_durable_commits(db, clock, schema):
    single = Database(TEST_URL, schema=schema, min_size=1, max_size=1)
    worker = Worker(single, "w1", clock=clock, secret_key=SECRET)
    try:
        wf = make_runnable(db, clock.now(), [python_step("first", "noop")])
        queue_run(db, wf, clock.now(), clock.now())
        worker.run_once(clock.now())
        with single.connection() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
            assert conn.autocommit is False
    finally:
        worker.close(clock.now())
        single.close()


def test_an_environment_runs_its_own_interpreter(db, clock, workers):
    import sys

    base = sys._base_executable  # the interpreter under the venv: no tickwarden, no psycopg
    wf = make_runnable(db, clock.now(), [
        python_step("which", "interpreter"),
        {"name": "query", "kind": "sql", "query": "SELECT 1", "database": "secret:ANY_DB"},
    ])
    set_secret(db, wf.tenant_id, "ANY_DB", TEST_URL, clock.now())
    with db.transaction() as store:
        store.catalog.apply_environment(wf.tenant_id, "main", base, 600, clock.now())
    run = queue_run(db, wf, clock.now(), clock.now())
    workers(environ={}).run_once(clock.now())
    run, attempt, steps = outcome(db, run.id)
    assert steps["which"].output == {"executable": base, "has_tickwarden": False}
    assert attempt.error_category == "config" and "psycopg is not installed" in attempt.error


@pytest.mark.parametrize("fail", [False, True])
def test_text_the_database_cannot_store_is_replaced_not_fatal(db, clock, workers, fail):
    """A step's NUL or lone surrogate once failed the outcome's write: the attempt was left running."""
    wf = make_runnable(db, clock.now(), [python_step("s", "unstorable", params={"fail": fail})])
    run = queue_run(db, wf, clock.now(), clock.now())
    workers().run_once(clock.now())
    run, attempt, steps = outcome(db, run.id)
    assert attempt.status == ("failed" if fail else "succeeded")
    assert "before\ufffdafter \ufffd" in steps["s"].log
    if fail:
        assert "bad\ufffdbyte \ufffd" in attempt.error
    else:
        assert attempt.outputs == {"s": {"text\ufffd": "a\ufffdb\ufffd", "rows": 3}}


def test_a_process_killed_while_kept_busy_for_the_next_attempt_is_replaced_by_that_attempt(db, clock, workers):
    wf = make_runnable(db, clock.now(), [python_step("who", "pid")])
    runs = [queue_run(db, wf, clock.now() - timedelta(minutes=2 - i), clock.now()) for i in range(2)]
    worker = workers(batch=2)
    worker.run_once(clock.now())
    [instance] = worker.environments.live()
    # Leased with the first, the second is of the same environment: the process is kept busy for it,
    # and the pass's janitor leaves the look at it to that attempt's `acquire`.
    assert instance.marked == "busy"
    instance.process.kill()
    worker.run_once(clock.now())
    first, second = (outcome(db, r.id) for r in runs)
    assert first[0].status == second[0].status == "succeeded"
    assert first[2]["who"].output["pid"] == instance.pid != second[2]["who"].output["pid"]
    with db.transaction() as store:
        statuses = {i.id: i.status for i in store.execution.list_environment_instances(include_stopped=True)}
    assert statuses.pop(instance.row_id) == "dead" and list(statuses.values()) == ["warm"]
