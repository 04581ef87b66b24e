"""A tenant's retention per class: read it, replace its overrides."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel

from tickwarden import retention
from tickwarden.api import schemas as s
from tickwarden.api.deps import NAME_PATTERN, Scope, Scoped
from tickwarden.api.problems import Problem
from tickwarden.models import RetentionPolicy
from tickwarden.retention_days import CLASSES

router = APIRouter(tags=["retention"], responses=s.PROBLEMS)

TenantName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]


class RetentionOut(BaseModel):
    tenant: str
    days: dict[str, int]
    overrides: dict[str, int | None]


def _tenant_id(scope: Scope, tenant: str) -> int:
    scope.visible_tenant(tenant)
    with scope.store() as store:
        found = store.catalog.get_tenant_by_name(tenant)
    if found is None:
        raise Problem(404, "Not found", f"No tenant named {tenant!r}.")
    return found.id


def _out(tenant: str, policy: RetentionPolicy | None) -> RetentionOut:
    overrides = {k: getattr(policy, f"{k}_days") if policy else None for k in CLASSES}
    return RetentionOut(tenant=tenant, days=retention.effective_days(policy), overrides=overrides)


@router.get("/api/tenants/{tenant}/retention", response_model=RetentionOut,
            summary="How long each class of the tenant's data is kept")
def get_retention(tenant: TenantName, scope: Scoped) -> RetentionOut:
    tenant_id = _tenant_id(scope, tenant)
    with scope.store() as store:
        return _out(tenant, store.retention.get_policy(tenant_id))


@router.put("/api/tenants/{tenant}/retention", response_model=RetentionOut,
            summary="Replace the tenant's retention overrides (an omitted class keeps the default)")
def put_retention(tenant: TenantName, body: retention.RetentionSpec, scope: Scoped) -> RetentionOut:
    tenant_id = _tenant_id(scope, tenant)
    with scope.store() as store:
        policy = retention.set_tenant_retention(store, tenant_id, body, scope.clock.now())
    return _out(tenant, policy)
