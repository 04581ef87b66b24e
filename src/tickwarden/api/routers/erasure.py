"""Erasure (platform only): erase a tenant or a person, dry-run first, and read the audit."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from tickwarden import erasure
from tickwarden.api import schemas as s
from tickwarden.api.deps import NAME_PATTERN, Scope, Scoped
from tickwarden.api.problems import Problem

router = APIRouter(tags=["erasure"], responses=s.PROBLEMS)


class ErasureIn(s.Input):
    """Exactly one of `tenant` or `subject` (an email address)."""

    tenant: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=63)
    subject: str | None = Field(default=None, max_length=400)
    dry_run: bool = False


class ErasureOut(BaseModel):
    kind: str
    dry_run: bool
    total: int
    counts: dict[str, int]
    audit_id: int | None


class ErasureAuditOut(BaseModel):
    id: int
    kind: str
    target: str
    actor: str
    at: datetime
    counts: dict[str, int]


def _platform(scope: Scope) -> None:
    if not scope.principal.platform:
        raise Problem(403, "Forbidden", "Erasure needs a platform token.")


@router.post("/api/erasures", response_model=ErasureOut, summary="Erase a tenant or a person (platform only)",
             responses={403: {"description": "Not a platform token."}})
def erase(body: ErasureIn, scope: Scoped) -> ErasureOut:
    _platform(scope)
    if (body.tenant is None) == (body.subject is None):
        raise Problem(422, "Unprocessable Content", "Give exactly one of 'tenant' or 'subject'.")
    now = scope.clock.now()
    actor = scope.principal.actor
    if body.tenant is not None:
        tenant = body.tenant
        report = scope.retrying(lambda store: erasure.erase_tenant(store, tenant, actor=actor, now=now,
                                                                   dry_run=body.dry_run))
    else:
        subject = body.subject or ""
        report = scope.retrying(lambda store: erasure.erase_subject(store, subject, actor=actor, now=now,
                                                                    dry_run=body.dry_run))
    return ErasureOut(**report.as_dict())


@router.get("/api/erasures", response_model=list[ErasureAuditOut], summary="The erasure audit, newest first",
            responses={403: {"description": "Not a platform token."}})
def list_erasures(scope: Scoped, limit: Annotated[int, Query(ge=1, le=s.MAX_LIMIT)] = s.DEFAULT_LIMIT,
                  ) -> list[ErasureAuditOut]:
    _platform(scope)
    with scope.store() as store:
        audits = store.erasure.list_audits(limit)
    return [ErasureAuditOut(id=a.id, kind=a.kind, target=a.target, actor=a.actor, at=a.at, counts=a.counts)
            for a in audits]
