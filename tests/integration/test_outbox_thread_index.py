"""The outbox's thread index holds held deliveries too (migration 0041): the head-of-thread test probes it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from psycopg.types.json import Jsonb

from tests.apiutil import seed_tenant
from tests.dbutil import TEST_URL, drop_schema, make_schema, upgrade_before
from tickwarden import migrate
from tickwarden.db import Database

NOW = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)

# The test every claim and look of the notifier makes for a candidate delivery.
EARLIER_UNDELIVERED = ("SELECT 1 FROM notification_outbox p"
                       " WHERE p.alert_id = %(alert)s AND p.channel_id = %(channel)s"
                       "   AND p.status IN ('pending', 'failed', 'sending', 'held') AND p.event_id < %(event)s")


def test_migrating_keeps_the_outbox_and_the_head_of_thread_test_probes_the_thread_index() -> None:
    """0041 keeps every delivery; a later event waits behind an earlier held one as before, and the
    test for an earlier undelivered event is a probe of the thread index, held rows included."""
    name = make_schema("mig")
    everything = migrate.available_migrations()
    try:
        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            upgrade_before(conn, 41, NOW)
            conn.commit()
        with Database(TEST_URL, schema=name) as db:
            acme = seed_tenant(db, NOW, "acme")
            with db.connection() as conn, conn.transaction():
                first = conn.execute("SELECT id FROM alert_events WHERE alert_id = %s", (acme.alert_id,)).fetchone()[0]
                second = conn.execute(
                    "INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, data)"
                    " VALUES (%s, %s, 'escalated', %s, 'critical', 'engineering', %s) RETURNING id",
                    (acme.tenant_id, acme.alert_id, NOW, Jsonb({}))).fetchone()[0]
                for event, status in ((first, "held"), (second, "pending")):
                    conn.execute(
                        "INSERT INTO notification_outbox (tenant_id, event_id, alert_id, channel_id, status, tries,"
                        " next_attempt_at, created_at) VALUES (%s, %s, %s, %s, %s, 0, %s, %s)",
                        (acme.tenant_id, event, acme.alert_id, acme.channel_id, status,
                         NOW - timedelta(minutes=1), NOW - timedelta(minutes=5)))
        probe = {"alert": acme.alert_id, "channel": acme.channel_id, "event": second}

        def plan(conn: psycopg.Connection) -> str:
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute("SET LOCAL enable_bitmapscan = off")
            conn.execute("SET LOCAL tickwarden.platform = 'on'")
            return "\n".join(r[0] for r in conn.execute("EXPLAIN " + EARLIER_UNDELIVERED, probe))

        with psycopg.connect(TEST_URL, options=f"-c search_path={name}") as conn:
            assert "notification_outbox_thread_idx" not in plan(conn)
            conn.rollback()
            assert [m.version for m in migrate.upgrade(conn, NOW)] == [m.version for m in everything if m.version >= 41]
            assert "Index Only Scan using notification_outbox_thread_idx" in plan(conn)
            assert conn.execute(EARLIER_UNDELIVERED, probe).fetchall() == [(1,)]
            assert conn.execute("SELECT count(*) FROM notification_outbox").fetchone() == (2,)
            conn.rollback()
        with Database(TEST_URL, schema=name) as db, db.transaction() as store:
            # the pending reply waits behind the held first message: nothing to claim
            assert store.outbox.claim_deliveries("r1", NOW, NOW + timedelta(minutes=1), 10, ["recording"])() == []
    finally:
        drop_schema(name)
