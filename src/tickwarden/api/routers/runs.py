"""Runs: one per tick (or manual run) with every attempt underneath and its sanitized logs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path

from tickwarden import auth, catalog
from tickwarden.ack_links import platform_secrets
from tickwarden.api import convert
from tickwarden.api import schemas as s
from tickwarden.api.deps import MAX_ID, Scoped
from tickwarden.api.problems import Problem

router = APIRouter(tags=["runs"], responses=s.PROBLEMS)

RunId = Annotated[int, Path(ge=1, le=MAX_ID, description="Run id.")]


@router.get("/api/runs/{run_id}", response_model=s.RunDetailOut, summary="Show a run with its attempts and step logs")
def get_run(scope: Scoped, run_id: RunId) -> s.RunDetailOut:
    with scope.store() as store:
        view = store.api.get_run(run_id)
        if view is None:
            raise Problem(404, "Not found", f"No run {run_id}.")
        attempts = store.ledger.list_attempts(run_id, view.run.scheduled_for)
        steps = store.api.list_run_steps(run_id, view.run.scheduled_for)
    return convert.run_detail_out(view.run, view.tenant_name, view.workflow_name, attempts, steps)


@router.post("/api/runs/{run_id}/cancel", response_model=s.RunOut,
             summary="Cancel a run in progress: its attempt is stopped, no retry, no failure counted")
def cancel_run(scope: Scoped, run_id: RunId) -> s.RunOut:
    with scope.store() as store:
        view = store.api.get_run(run_id)  # a run of another tenant is not found, as for reading it
    if view is None:
        raise Problem(404, "Not found", f"No run {run_id}.")
    run = catalog.cancel(scope.db, run_id, scope.clock.now(), scope.principal.actor)
    return convert.run_out(run, view.tenant_name, view.workflow_name)


@router.post("/api/run-credentials/verify", response_model=s.RunCredentialOut,
             summary="Check a run credential a step presented: signed here, fresh, of your tenant, still running")
def verify_run_credential(scope: Scoped, body: s.RunCredentialIn) -> s.RunCredentialOut:
    """A tenant's own service asks whether a caller holding a credential is one of its runs.

    Valid only while the attempt it was issued to runs: a credential copied out of a finished
    attempt's environment is refused even within its five minutes. A credential of another
    tenant reads as not of this tenant, and says nothing of that tenant's runs.
    """
    current, old = platform_secrets()
    try:
        claims = auth.verify_run_credential(body.credential, scope.clock.now(), [current, *old])
    except auth.AuthError as refused:
        return s.RunCredentialOut(valid=False, reason=f"{str(refused).capitalize()}.")
    not_ours = s.RunCredentialOut(valid=False, reason="The run credential was not issued to a run of your tenant.")
    if not scope.principal.platform and claims["tenant"] != scope.principal.tenant_name:
        return not_ours
    try:
        tick = datetime.strptime(str(claims["scheduled_for"]), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        attempt = int(claims["attempt"])
    except ValueError:
        return s.RunCredentialOut(valid=False, reason="The run credential is not validly signed.")
    with scope.store() as store:
        found = store.api.run_credential_attempt(str(claims["tenant"]), str(claims["workflow"]), tick, attempt)
    if found is None:
        return not_ours
    run_id, running = found
    if not running:
        return s.RunCredentialOut(valid=False, reason="The attempt this run credential was issued to has ended.")
    return s.RunCredentialOut(valid=True, tenant=str(claims["tenant"]), workflow=str(claims["workflow"]),
                              publisher=str(claims["publisher"]), scheduled_for=tick, attempt=attempt, run_id=run_id)
