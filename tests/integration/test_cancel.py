"""Cancelling a run by hand: the worker's abort path, no retry, no effect on the failure streak."""

import threading
import time
from datetime import timedelta

import httpx
import pytest

from tests.apiutil import api, live_server, make_token, seed_tenant
from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tests.helpers import create_run, lease, make_workflow, streak, tick
from tickwarden import catalog
from tickwarden.errors import Conflict, NotFound
from tickwarden.models import AttemptOutcome
from tickwarden.poller import OutcomePoller
from tickwarden.worker import Worker


def test_it_stops_the_running_attempt_through_the_workers_abort_path_and_never_retries(db, clock):
    wf = make_runnable(db, clock.now(), [python_step("stuck", "hang", params={"seconds": 120})])
    run = queue_run(db, wf, clock.now(), clock.now(), budget=3)
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET, lease_seconds=1.5)
    returned: list = []
    thread = threading.Thread(target=lambda: returned.append(worker.run_once(clock.now())), daemon=True)
    try:
        thread.start()
        for _ in range(200):
            with db.transaction() as store:
                if store.ledger.list_attempts(run.id)[0].status == "running":
                    break
            time.sleep(0.05)
        cancelled = catalog.cancel(db, run.id, clock.now(), "oncall")
        assert (cancelled.status, cancelled.cancelled_by) == ("cancelled", "oncall")
        started = time.monotonic()
        thread.join(30)
        # the hanging step was stopped at the next lease renewal, not after its 120 s
        assert not thread.is_alive() and time.monotonic() - started < 15
    finally:
        worker.environments.close(clock.now())
    OutcomePoller(db, "p1").run_once(clock.now() + timedelta(minutes=5))
    with db.transaction() as store:
        after = store.ledger.get_run(run.id)
        attempts = store.ledger.list_attempts(run.id)
    assert (after.status, after.finished_at, after.error_category) == ("cancelled", clock.now(), None)
    assert [(a.number, a.status) for a in attempts] == [(1, "cancelled")]  # no retry, budget notwithstanding


def test_a_late_outcome_of_a_cancelled_attempt_is_refused(db, clock):
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now())
    with db.transaction() as store:
        attempt = lease(store, "w1", clock.now(), 30)[0]
    catalog.cancel(db, run.id, clock.now(), "oncall")
    with db.transaction() as store:
        finished = store.ledger.finish_attempt(attempt, "w1", AttemptOutcome(status="failed", error="boom"), clock.now())
        assert not finished.applied
        assert store.ledger.get_run(run.id).status == "cancelled"


def test_a_cancelled_run_neither_breaks_nor_extends_the_failure_streak(db, clock):
    wf = make_workflow(db, clock.now())
    base = clock.now()
    with db.transaction() as store:
        for hour in (0, 1, 3):
            store.ledger.create_tick_run(tick(wf, base + timedelta(hours=hour), budget=0), base)
        # the deadline pass gives the three their verdict `missed` (each deadline is three hours after its tick)
        past = base + timedelta(hours=6)
        assert len(store.monitoring.close_overdue_and_arm(past, 500, "no outcome", past)) == 3
    middle = create_run(db, wf, base + timedelta(hours=2), base, budget=0)
    catalog.cancel(db, middle.id, base, "oncall")
    with db.transaction() as store:
        assert streak(store, wf.id) == 3


def test_it_refuses_to_cancel_a_finished_or_unknown_run(db, clock):
    wf = make_workflow(db, clock.now())
    run = create_run(db, wf, clock.now(), clock.now())
    catalog.cancel(db, run.id, clock.now(), "oncall")
    with pytest.raises(Conflict, match="already cancelled"):
        catalog.cancel(db, run.id, clock.now(), "someone-else")
    with db.transaction() as store:
        assert store.ledger.get_run(run.id).cancelled_by == "oncall"  # the first cancel stands
    with pytest.raises(NotFound):
        catalog.cancel(db, run.id + 1000, clock.now(), "oncall")


def test_the_actor_is_stored_as_an_alerts_is_redacted_on_one_short_line(db, clock):
    """A canceller's text is the caller's own (a token's name, `--by`): an address, a secret or a
    second line in it never reaches the ledger, and a long one is cut, not refused."""
    wf = make_workflow(db, clock.now())
    first = create_run(db, wf, clock.now(), clock.now())
    second = create_run(db, wf, clock.now() + timedelta(hours=1), clock.now())
    cancelled = catalog.cancel(db, first.id, clock.now(), "acme:on call ana@acme.test\npassword=hunter2")
    assert cancelled.cancelled_by == "acme:on call [email] password=[redacted]"
    long = catalog.cancel(db, second.id, clock.now(), "the on-call engineer " * 15)
    with db.transaction() as store:
        stored = store.ledger.get_run(second.id).cancelled_by
    assert stored == long.cancelled_by and len(stored) == 100 and stored.endswith("…")


def test_the_api_cancels_a_tenants_own_run_with_the_tokens_actor_and_hides_others(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    seed_tenant(db, clock.now(), "globex")
    acme_token = make_token(db, clock.now(), tenant="acme", name="alice@acme.test")
    globex_token = make_token(db, clock.now(), tenant="globex", name="gina")
    with db.transaction() as store:
        wf = store.catalog.get_workflow(acme.workflow_id)
    run = create_run(db, wf, clock.now() + timedelta(days=1), clock.now())
    with live_server(db, clock) as base:
        with api(base, globex_token) as other:
            assert other.post(f"/api/runs/{run.id}/cancel").status_code == 404
        with api(base, acme_token) as client:
            done = client.post(f"/api/runs/{run.id}/cancel")
            assert done.status_code == 200, done.text
            body = done.json()
            assert (body["status"], body["cancelled_by"]) == ("cancelled", "acme:[email]")
            again = client.post(f"/api/runs/{run.id}/cancel")
            assert again.status_code == 409 and again.json()["detail"].endswith(".")
        assert httpx.post(f"{base}/api/runs/{run.id}/cancel").status_code == 401


def test_the_dashboard_button_cancels_with_the_signed_in_actor_and_shows_rows(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    seed_tenant(db, clock.now(), "globex")
    acme_token = make_token(db, clock.now(), tenant="acme", name="alice")
    globex_token = make_token(db, clock.now(), tenant="globex", name="gina")
    with db.transaction() as store:
        wf = store.catalog.get_workflow(acme.workflow_id)
    run = create_run(db, wf, clock.now() + timedelta(days=1), clock.now())
    with live_server(db, clock) as base:
        with httpx.Client(base_url=base, cookies={"tickwarden_token": globex_token}) as intruder:
            assert intruder.post(f"/dashboard/runs/{run.id}/cancel").status_code == 404
        with httpx.Client(base_url=base, cookies={"tickwarden_token": acme_token}) as client:
            page = client.get(f"/dashboard/runs/{run.id}")
            assert 'id="cancel-form"' in page.text
            done = client.post(f"/dashboard/runs/{run.id}/cancel")
            assert done.status_code == 303
            after = client.get(f"/dashboard/runs/{run.id}")
            assert "cancelled by" in after.text and 'id="cancel-form"' not in after.text
            assert "not reported" in after.text
            again = client.post(f"/dashboard/runs/{run.id}/cancel")
            assert again.status_code == 409 and "already cancelled" in again.text
    with db.transaction() as store:
        assert store.ledger.get_run(run.id).cancelled_by
