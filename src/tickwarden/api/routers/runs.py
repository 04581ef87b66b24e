"""Runs: one per tick (or manual run) with every attempt underneath and its sanitized logs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from tickwarden import catalog
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
