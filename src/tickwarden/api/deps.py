"""Shared dependencies of every router: the caller, the tenant context, the database.

A request authenticates with `Authorization: Bearer <token>` (the dashboard sends the
same token in an HttpOnly cookie). Tokens are stored as SHA-256 hashes. A `member`
token sees one tenant; a `platform` token sees every tenant. Every database
transaction a request opens runs as the role `tickwarden_app` with the caller's
tenant context, so row-level security decides what exists for the caller.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tickwarden.api.problems import Problem
from tickwarden.clock import Clock
from tickwarden.db import Database
from tickwarden.store import Store

T = TypeVar("T")

TOKEN_PREFIX = "twk_"
COOKIE_NAME = "tickwarden_token"
# What a token may look like: anything else is rejected before a database lookup.
TOKEN_SHAPE = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
MAX_ID = 2**63 - 1

bearer = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer twk_…`.")


def new_token() -> str:
    """Return a fresh random token; only its hash is ever stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant member or a platform engineer."""

    token_id: int
    name: str
    role: str
    tenant_id: int | None
    tenant_name: str | None

    @property
    def platform(self) -> bool:
        return self.role == "platform"

    @property
    def actor(self) -> str:
        """How the caller appears in an alert's history."""
        return f"{self.tenant_name or 'platform'}:{self.name}"


def authenticate(db: Database, token: str | None, now: datetime) -> Principal | None:
    """Return the principal of a live token, or None."""
    if not token or not TOKEN_SHAPE.match(token):
        return None
    with db.transaction() as store:
        # Token lookup crosses tenants by nature; it reads nothing but the token row.
        store.api.enter_tenant_context(None, platform=True)
        found = store.api.find_api_token(hash_token(token))
        if found is None:
            return None
        store.api.touch_api_token(found.id, now)
    return Principal(found.id, found.name, found.role, found.tenant_id, found.tenant_name)


@dataclass(frozen=True)
class Scope:
    """What a request may touch: the database as the caller, and the clock."""

    db: Database
    clock: Clock
    principal: Principal

    @contextlib.contextmanager
    def store(self) -> Iterator[Store]:
        """Open one transaction in the caller's tenant context."""
        with self.db.transaction() as store:
            store.api.enter_tenant_context(self.principal.tenant_id, platform=self.principal.platform)
            yield store

    def retrying(self, work: Callable[[Store], T]) -> T:
        """Run `work` in one transaction in the caller's tenant context, again if a deadlock's victim.

        For the writes that meet the live loops' locks in another order (erasing a tenant):
        see `Database.retrying`.
        """

        def in_context(store: Store) -> T:
            store.api.enter_tenant_context(self.principal.tenant_id, platform=self.principal.platform)
            return work(store)

        return self.db.retrying(in_context)

    def visible_tenant(self, tenant: str | None) -> str | None:
        """Check a tenant filter: members may only name their own tenant."""
        if tenant is not None and not self.principal.platform and tenant != self.principal.tenant_name:
            raise Problem(404, "Not found", f"No tenant named {tenant!r}.")
        return tenant


def token_from_request(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str | None:
    if credentials is not None and credentials.scheme.lower() == "bearer":
        return credentials.credentials
    return request.cookies.get(COOKIE_NAME)


def get_db(request: Request) -> Database:
    return request.app.state.db


def get_clock(request: Request) -> Clock:
    return request.app.state.clock


def get_scope(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Scope:
    """Authenticate the request and return its scope; 401 without a live token."""
    db, clock = get_db(request), get_clock(request)
    token = token_from_request(request, credentials)
    if not token:
        raise Problem(401, "Unauthorized", "Send an API token as 'Authorization: Bearer <token>'.",
                      headers={"WWW-Authenticate": "Bearer"})
    principal = authenticate(db, token, clock.now())
    if principal is None:
        raise Problem(401, "Unauthorized", "The API token is unknown or revoked.",
                      headers={"WWW-Authenticate": "Bearer"})
    return Scope(db=db, clock=clock, principal=principal)


Scoped = Annotated[Scope, Depends(get_scope)]
