"""Operations endpoints: liveness, readiness and Prometheus metrics (no token needed)."""

from __future__ import annotations

import psycopg
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from tickwarden import metrics
from tickwarden.api.problems import problem_response
from tickwarden.errors import TickwardenError
from tickwarden.migrate import pending

router = APIRouter(tags=["operations"])

READY_TIMEOUT = 1.0  # seconds /readyz waits for a database connection


@router.get("/healthz", summary="The process is up")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="The database is reachable and every migration is applied",
            responses={503: {"description": "Not ready"}})
def readyz(request: Request) -> JSONResponse:
    db = request.app.state.db
    try:
        # A probe answers at once: a balancer asking during an outage must not wait the pool's timeout.
        with db.transaction(timeout=READY_TIMEOUT) as store:
            waiting = pending(store.conn)
            platform = store.api.sees_every_tenant()
    except (psycopg.Error, TickwardenError):
        return problem_response(503, "The database cannot be reached.", title="Not ready")
    if waiting:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in waiting)
        return problem_response(503, f"Migrations are pending: {names}; run 'tickwarden db upgrade'.",
                                title="Not ready")
    if not platform:
        # Forced row-level security would hide every tenant from the background loops.
        return problem_response(503, "The database connection runs without the platform context, so background "
                                     "loops would see no tenant; add '-c tickwarden.platform=on' to its options.",
                                title="Not ready")
    return JSONResponse({"status": "ready"})


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def prometheus(request: Request) -> Response:
    return Response(metrics.render(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
