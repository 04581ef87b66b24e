"""What the lease reaper's statements read: the ledger's running attempts only when an instance needs them."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from tests.helpers import create_run, lease, make_workflow
from tickwarden.store.queries import queries

IDLE_TIMEOUT = 60
GRACE = 300  # the statements' default grace past the idle timeout


def instances(db, now, statuses: dict[str, str]) -> None:
    """One instance per worker, last used at `now`, and a long running attempt for worker `w1`."""
    with db.transaction() as store:
        tenant = store.catalog.upsert_tenant("acme", now)
        env = store.catalog.apply_environment(tenant.id, "main", None, IDLE_TIMEOUT, now).row
        for pid, (worker, status) in enumerate(statuses.items(), 1):
            store.execution.start_environment_instance(tenant_id=tenant.id, environment_id=env.id, worker_id=worker,
                                                       pid=pid, status=status, now=now)
    create_run(db, make_workflow(db, now), now, now)
    with db.transaction() as store:
        lease(store, "w1", now, 3600)


def subplan_loops(db, name: str, params: dict[str, Any]) -> list[int]:
    """How often each of the statement's subplans ran, from its EXPLAIN (ANALYZE) in a rolled-back transaction."""
    with db.connection() as conn:
        try:
            [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries()[name], params).fetchone()
        finally:
            conn.rollback()
    if isinstance(plan, str):
        plan = json.loads(plan)
    loops: list[int] = []

    def walk(node: dict[str, Any]) -> None:
        if node.get("Parent Relationship") == "SubPlan":
            loops.append(node["Actual Loops"])
        for child in node.get("Plans", ()):
            walk(child)

    walk(plan["Plan"])
    return loops


def test_an_idle_look_reads_no_running_attempt_for_the_instances_in_their_timeout(db, clock):
    now = clock.now()
    instances(db, now, {"w1": "busy", "w2": "warm", "w3": "busy"})
    params = {"now": now + timedelta(seconds=IDLE_TIMEOUT + GRACE - 1), "grace_seconds": GRACE}
    for name in ("execution_reaper_waiting", "execution_abandon_environment_instances"):
        loops = subplan_loops(db, name, params)
        assert loops and set(loops) == {0}, (name, loops)  # busy ones, in their timeout: no look at the ledger
    with db.probe() as store:
        assert not store.execution.reaper_waiting(params["now"])


def test_past_the_timeout_a_busy_instance_is_abandoned_only_without_a_running_attempt(db, clock):
    now = clock.now()
    instances(db, now, {"w1": "busy", "w2": "busy"})
    past = now + timedelta(seconds=IDLE_TIMEOUT + GRACE)
    with db.probe() as store:
        assert store.execution.reaper_waiting(past)  # w2's instance: its worker holds no running attempt
    with db.transaction() as store:
        assert store.execution.abandon_environment_instances(past) == 1
        remaining = {i.worker_id: i.status for i in store.execution.list_environment_instances(include_stopped=True)}
    assert remaining == {"w1": "busy", "w2": "dead"}
    with db.probe() as store:  # w1's attempt runs on (a lease of an hour): nothing left to do
        assert not store.execution.reaper_waiting(past)
        assert store.execution.reaper_waiting(now + timedelta(seconds=3600))
