"""Who am I, and which tenants can I see."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tickwarden.api import schemas as s
from tickwarden.api.deps import Scoped

router = APIRouter(tags=["tenants"], responses=s.PROBLEMS)


@router.get("/api/me", response_model=s.MeOut, summary="Show the caller's token name, role and tenant")
def me(scope: Scoped) -> s.MeOut:
    p = scope.principal
    return s.MeOut(name=p.name, role=p.role, tenant=p.tenant_name)


@router.get("/api/tenants", response_model=s.Page[s.TenantOut], summary="List the tenants the caller can see")
def list_tenants(
    scope: Scoped,
    limit: Annotated[int, Query(ge=1, le=s.MAX_LIMIT)] = s.DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> s.Page[s.TenantOut]:
    after = s.decode_cursor(cursor, (str,))
    with scope.store() as store:
        tenants = store.api.list_tenants(after[0] if after else None, limit + 1)
    page = tenants[:limit]
    next_cursor = s.encode_cursor([page[-1].name]) if len(tenants) > limit else None
    return s.Page[s.TenantOut](
        items=[s.TenantOut(id=t.id, name=t.name, display_name=t.display_name, shadow=t.shadow) for t in page],
        next_cursor=next_cursor)
