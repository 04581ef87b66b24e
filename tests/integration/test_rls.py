"""Row-level security bypassing the API: as tickwarden_app, a tenant context sees only its rows."""

from __future__ import annotations

import psycopg
import pytest

from tests.apiutil import make_token, seed_tenant
from tests.dbutil import TEST_URL


def tenant_tables(conn, schema):
    return [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND EXISTS (SELECT 1 FROM pg_attribute a"
        "  WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped) ORDER BY 1", (schema,))]


@pytest.fixture
def seeded(db, clock):
    acme = seed_tenant(db, clock.now(), "acme")
    globex = seed_tenant(db, clock.now(), "globex")
    make_token(db, clock.now(), tenant="acme")
    make_token(db, clock.now(), tenant="globex")
    make_token(db, clock.now())
    with db.transaction() as store:  # a platform (engineering) channel has no tenant
        store.outbox.upsert_notification_channel(tenant_id=None, name="eng", kind="recording", audience="engineering",
                                          now=clock.now())
    return acme, globex


def as_app(schema, tenant_id=None, platform=False):
    conn = psycopg.connect(TEST_URL, options=f"-c search_path={schema}")
    conn.execute("SET ROLE tickwarden_app")
    if tenant_id is not None:
        conn.execute("SELECT set_config('tickwarden.tenant_id', %s, false)", (str(tenant_id),))
    if platform:
        conn.execute("SELECT set_config('tickwarden.platform', 'on', false)")
    return conn


def test_every_tenant_table_forces_row_level_security(db, schema, seeded):
    with psycopg.connect(TEST_URL) as conn:
        tables = tenant_tables(conn, schema) + ["tenants"]
        flags = conn.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = ANY(%s)",
            (schema, tables)).fetchall()
    assert len(tables) >= 15
    assert sorted(flags) == sorted((t, True, True) for t in tables)


def test_a_tenant_context_sees_only_its_own_rows_in_every_table(db, schema, seeded):
    acme, globex = seeded
    with psycopg.connect(TEST_URL) as conn:
        tables = tenant_tables(conn, schema)
    with as_app(schema, tenant_id=acme.tenant_id) as conn:
        for table in tables:
            owners = {r[0] for r in conn.execute(f"SELECT DISTINCT tenant_id FROM {table}")}
            assert owners <= {acme.tenant_id}, table
        assert [r[0] for r in conn.execute("SELECT name FROM tenants")] == ["acme"]
        for table in ("runs", "attempts", "alerts", "alert_events", "attempt_steps", "workflows", "api_tokens"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table


def test_no_context_sees_nothing_and_the_platform_sees_everything(db, schema, seeded):
    with as_app(schema) as conn:
        for table in ("tenants", "runs", "alerts", "api_tokens", "notification_channels"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table
    with as_app(schema, platform=True) as conn:
        assert conn.execute("SELECT count(*) FROM tenants").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM notification_channels WHERE tenant_id IS NULL").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM api_tokens WHERE tenant_id IS NULL").fetchone()[0] == 1


def test_a_tenant_cannot_write_or_change_another_tenants_rows(db, schema, seeded, clock):
    acme, globex = seeded
    with as_app(schema, tenant_id=acme.tenant_id) as conn:
        assert conn.execute("UPDATE alerts SET owner = 'customer' WHERE id = %s", (globex.alert_id,)).rowcount == 0
        assert conn.execute("DELETE FROM runs WHERE tenant_id = %s", (globex.tenant_id,)).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner)"
                         " VALUES (%s, %s, 'noted', %s, 'warning', 'customer')",
                         (globex.tenant_id, globex.alert_id, clock.now()))
    with as_app(schema, tenant_id=acme.tenant_id) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE alerts SET tenant_id = %s WHERE id = %s", (globex.tenant_id, acme.alert_id))


def test_the_api_store_context_switches_role_for_the_transaction_only(db, seeded):
    acme, _ = seeded
    with db.transaction() as store:
        store.api.enter_tenant_context(acme.tenant_id, platform=False)
        assert [t.name for t in store.api.list_tenants(None, 10)] == ["acme"]
        assert store.conn.execute("SELECT current_user").fetchone()[0] == "tickwarden_app"
    with db.transaction() as store:
        assert store.conn.execute("SELECT current_user").fetchone()[0] != "tickwarden_app"
        assert len(store.api.list_tenants(None, 10)) == 2
