"""Check-ins: the ping URL an external job reports to, and issuing (rotating) that URL.

`POST /ping/{key}/{status}` carries no token: the key in the path is the secret
(unguessable, stored hashed, rate-limited per key). An unknown key answers 404 with
the same sentence whatever the reason. The body, if any, is a log excerpt (plain
text, at most `checkins.MAX_LOG_BYTES`), stored sanitized.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from tickwarden import checkins
from tickwarden.api import schemas as s
from tickwarden.api.deps import NAME_PATTERN, Scoped, get_clock, get_db
from tickwarden.api.problems import Problem
from tickwarden.clock import isoformat_z
from tickwarden.errors import UsageError

router = APIRouter(tags=["check-ins"], responses=s.PROBLEMS)

TenantName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63, description="Tenant name.")]
WorkflowName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63, description="Workflow name.")]


class CheckinOut(BaseModel):
    tenant: str
    workflow: str
    tick: str
    run_id: int
    run_status: str
    changed: bool


class CheckinUrlOut(BaseModel):
    path: str
    key: str
    created_at: str
    replaced: bool


@router.post("/ping/{key}/{status}", response_model=CheckinOut,
             summary="Report an external job's start, success or failure (no token: the key is the secret)")
async def ping(request: Request, key: Annotated[str, Path(max_length=200)], status: Annotated[str, Path(max_length=20)],
               tick: Annotated[str | None, Query(max_length=64, description="The tick reported on; "
                                                 "default: the newest tick due now.")] = None,
               exit_code: Annotated[int | None, Query(ge=0, le=checkins.MAX_EXIT_CODE)] = None) -> CheckinOut:
    if status not in checkins.STATUSES:
        raise Problem(404, "Not found", "A check-in is POST /ping/KEY/start, /success or /fail.")
    body = await request.body()
    if len(body) > checkins.MAX_LOG_BYTES:
        raise Problem(413, "Request too large", f"The log excerpt exceeds {checkins.MAX_LOG_BYTES // 1024} KiB.")
    try:
        log = body.decode("utf-8") if body else None
    except UnicodeDecodeError:
        raise Problem(400, "Bad request", "The log excerpt is not UTF-8 text.") from None
    try:
        report = checkins.parse_report(status, tick=tick, exit_code=exit_code, log=log)
    except UsageError as exc:
        raise Problem(422, "Invalid input", exc.message) from None
    db, clock = get_db(request), get_clock(request)
    try:
        # The database work blocks: off the event loop, as FastAPI runs a sync handler.
        recorded = await run_in_threadpool(checkins.report_by_key, db, key, report, clock.now())
    except checkins.RateLimited as exc:
        raise Problem(429, "Too many requests", exc.message,
                      headers={"Retry-After": str(exc.retry_after_seconds)}) from None
    except UsageError as exc:
        raise Problem(422, "Invalid input", exc.message) from None
    return CheckinOut(**recorded.as_dict())  # type: ignore[arg-type]


@router.post("/api/tenants/{tenant}/workflows/{workflow}/checkin-url", response_model=CheckinUrlOut,
             status_code=201, summary="Issue an external workflow's ping URL (shown once; rotate replaces it)")
def issue_checkin_url(scope: Scoped, tenant: TenantName, workflow: WorkflowName,
                      rotate: Annotated[bool, Query(description="Replace an existing URL; the old one stops "
                                                    "working.")] = False) -> CheckinUrlOut:
    with scope.store() as store:
        # Another tenant's workflow does not exist for the caller (row-level security).
        visible = store.api.get_workflow(tenant, workflow)
    if visible is None:
        raise Problem(404, "Not found", f"No workflow {tenant}/{workflow}.")
    try:
        issued = checkins.issue_key(scope.db, tenant, workflow, scope.clock.now(), rotate=rotate)
    except UsageError as exc:
        raise Problem(409, "Conflict", exc.message) from None
    return CheckinUrlOut(path=issued.path, key=issued.key, created_at=isoformat_z(issued.created_at) or "",
                         replaced=issued.replaced)
