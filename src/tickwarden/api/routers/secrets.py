"""A tenant's secrets: write-only values. A value goes in once and never comes back out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from tickwarden import secrets
from tickwarden.api import schemas as s
from tickwarden.api.deps import NAME_PATTERN, Scoped
from tickwarden.api.problems import Problem
from tickwarden.errors import InvalidInput, NotFound

router = APIRouter(tags=["secrets"], responses=s.PROBLEMS)

TenantName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63, description="Tenant name.")]
SecretName = Annotated[str, Path(pattern=secrets.NAME.pattern, max_length=64, description="Secret name.")]


class SecretIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # No length or pattern constraint here: a failed constraint would echo the value
    # back in the validation error. `secrets.check_value` says what is wrong instead.
    value: str = Field(description="The secret's value; stored encrypted, never returned.")


class SecretOut(BaseModel):
    name: str
    reference: str
    created_at: datetime
    updated_at: datetime


def _out(info) -> SecretOut:  # type: ignore[no-untyped-def]
    return SecretOut(name=info.name, reference=f"secret:{info.name}", created_at=info.created_at,
                     updated_at=info.updated_at)


def _tenant_id(scope: Scoped, store, tenant: str) -> int:  # type: ignore[no-untyped-def]
    scope.visible_tenant(tenant)
    found = store.catalog.get_tenant_by_name(tenant)
    if found is None:
        raise Problem(404, "Not found", f"No tenant named {tenant!r}.")
    return found.id


@router.get("/api/tenants/{tenant}/secrets", response_model=list[SecretOut], summary="List a tenant's secrets")
def list_secrets(scope: Scoped, tenant: TenantName) -> list[SecretOut]:
    with scope.store() as store:
        return [_out(i) for i in store.secrets.list_secrets(_tenant_id(scope, store, tenant))]


@router.put("/api/tenants/{tenant}/secrets/{name}", response_model=SecretOut,
            summary="Set a secret (write-only: the value is never returned)")
def set_secret(scope: Scoped, tenant: TenantName, name: SecretName, body: SecretIn) -> SecretOut:
    try:
        secrets.check_value(body.value)
        keyring = secrets.Keyring.from_environment()
    except InvalidInput as exc:
        raise Problem(422, "Invalid input", exc.message) from None
    with scope.store() as store:
        info = secrets.set_secret(store, keyring, _tenant_id(scope, store, tenant), name, body.value, scope.clock.now())
    return _out(info)


@router.delete("/api/tenants/{tenant}/secrets/{name}", status_code=204, summary="Delete a secret")
def delete_secret(scope: Scoped, tenant: TenantName, name: SecretName) -> Response:
    with scope.store() as store:
        try:
            secrets.delete_secret(store, _tenant_id(scope, store, tenant), name)
        except NotFound as exc:
            raise Problem(404, "Not found", exc.message) from None
    return Response(status_code=204)
