"""Environments: where each tenant's workflows run, and which workers hold them warm."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from tickwarden.api import convert
from tickwarden.api import schemas as s
from tickwarden.api.deps import MAX_ID, NAME_PATTERN, Scoped
from tickwarden.api.problems import Problem

router = APIRouter(tags=["environments"], responses=s.PROBLEMS)


@router.get("/api/environments", response_model=s.Page[s.EnvironmentOut], summary="List environments")
def list_environments(
    scope: Scoped,
    tenant: Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=s.MAX_LIMIT)] = s.DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> s.Page[s.EnvironmentOut]:
    after = s.decode_cursor(cursor, (int,))
    with scope.store() as store:
        views = store.api.list_environments(tenant=scope.visible_tenant(tenant),
                                            after_id=after[0] if after else None, limit=limit + 1)
    page = views[:limit]
    next_cursor = s.encode_cursor([page[-1].environment.id]) if len(views) > limit else None
    return s.Page[s.EnvironmentOut](items=[convert.environment_out(v) for v in page], next_cursor=next_cursor)


@router.get("/api/environments/{environment_id}", response_model=s.EnvironmentDetailOut,
            summary="Show an environment and its instances")
def get_environment(scope: Scoped,
                    environment_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> s.EnvironmentDetailOut:
    with scope.store() as store:
        view = store.api.get_environment(environment_id)
        if view is None:
            raise Problem(404, "Not found", f"No environment {environment_id}.")
        instances = store.api.list_environment_instances(environment_id)
    return convert.environment_detail_out(view, instances)
