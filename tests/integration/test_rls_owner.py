"""Row-level security when the service connects as the tables' owner, not a superuser.

FORCE ROW LEVEL SECURITY filters the owner too: without a context it sees nothing,
with `tickwarden.platform=on` in its connection options (how the service runs its
background loops) it sees every tenant, and API requests still see only the caller's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.apiutil import api, live_server, make_token, seed_tenant
from tests.dbutil import TEST_URL, drop_schema, make_schema
from tickwarden.db import Database
from tickwarden.migrate import upgrade

OWNER = "tickwarden_test_owner"


def owner_url(schema: str, platform: bool) -> str:
    base = TEST_URL.replace("postgres@", f"{OWNER}@", 1)
    options = f"-c search_path={schema}" + (" -c tickwarden.platform=on" if platform else "")
    return f"{base}?options={quote(options)}"


@pytest.fixture
def owned_schema():
    name = make_schema("own")
    with psycopg.connect(TEST_URL, autocommit=True) as su:
        # Roles are cluster-wide: create them once, tolerating a parallel test doing the same.
        for statement in (f"CREATE ROLE {OWNER} LOGIN", "CREATE ROLE tickwarden_app NOLOGIN"):
            try:
                su.execute(statement)
            except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
                pass
        su.execute(f"GRANT tickwarden_app TO {OWNER}")
        su.execute(sql.SQL("ALTER SCHEMA {} OWNER TO {}").format(sql.Identifier(name), sql.Identifier(OWNER)))
    with psycopg.connect(owner_url(name, platform=False)) as conn:
        upgrade(conn, datetime(2026, 1, 1, tzinfo=UTC))
    yield name
    drop_schema(name)


def test_the_owner_sees_nothing_without_a_context_and_every_tenant_as_the_platform(owned_schema, clock):
    with Database(owner_url(owned_schema, platform=True)) as db:
        seed_tenant(db, clock.now(), "acme")
        seed_tenant(db, clock.now(), "globex")
        with db.connection() as conn:
            assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0] is False
            assert conn.execute("SELECT count(*) FROM tenants").fetchone()[0] == 2
    with psycopg.connect(owner_url(owned_schema, platform=False)) as conn:
        for table in ("tenants", "workflows", "runs", "alerts", "attempt_steps"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table


def test_api_requests_on_an_owner_connection_see_only_the_callers_tenant(owned_schema, clock):
    with Database(owner_url(owned_schema, platform=True)) as db:
        acme = seed_tenant(db, clock.now(), "acme")
        globex = seed_tenant(db, clock.now(), "globex")
        token = make_token(db, clock.now(), tenant="globex", name="gina")
        with live_server(db, clock) as base, api(base, token) as client:
            assert [t["name"] for t in client.get("/api/tenants").json()["items"]] == ["globex"]
            assert client.get(f"/api/alerts/{acme.alert_id}").status_code == 404
            assert client.get(f"/api/alerts/{globex.alert_id}").status_code == 200
            moved = client.post(f"/api/alerts/{globex.alert_id}/reassign", json={"owner": "customer"})
            assert moved.status_code == 200 and moved.json()["owner"] == "customer"


def test_an_owner_connection_gets_the_platform_context_without_asking(owned_schema, clock):
    # Database adds `-c tickwarden.platform=on` to every connection, so loops and
    # readiness work for a non-superuser owner with a plain URL too.
    with Database(owner_url(owned_schema, platform=False)) as db, live_server(db, clock) as base:
        assert httpx.get(base + "/readyz").json() == {"status": "ready"}
        with db.connection() as conn:
            assert conn.execute("SELECT current_setting('tickwarden.platform', true)").fetchone()[0] == "on"
