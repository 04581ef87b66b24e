"""A live API server for tests (uvicorn in a thread on a free port) and a seeded fleet."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import httpx
import uvicorn
from psycopg.types.json import Jsonb

from tickwarden.api.deps import hash_token, new_token
from tickwarden.api.main import create_app
from tickwarden.clock import Clock
from tickwarden.db import Database
from tickwarden.models import AttemptOutcome
from tickwarden.transports.recording import RecordingTransport
from tests.helpers import create_run, lease, publish


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def live_server(db: Database, clock: Clock, **kwargs) -> Iterator[str]:
    """Serve the real app with uvicorn on 127.0.0.1 in a thread; yield its base URL."""
    port = free_port()
    app = create_app(db, clock, **kwargs)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def make_token(db: Database, now: datetime, *, tenant: str | None = None, name: str = "test") -> str:
    token = new_token()
    with db.transaction() as store:
        tenant_id = store.catalog.get_tenant_by_name(tenant).id if tenant else None
        store.api.create_api_token(tenant_id=tenant_id, role="member" if tenant else "platform", name=name,
                               token_hash=hash_token(token), now=now)
    return token


@dataclass
class Seeded:
    """What `seed_tenant` created for one tenant: ids a test can aim at."""

    tenant: str
    tenant_id: int
    workflow: str
    workflow_id: int
    environment_id: int
    run_ids: list[int] = field(default_factory=list)
    alert_id: int = 0
    channel_id: int = 0
    token: str = ""


def seed_tenant(db: Database, now: datetime, tenant: str, *, secret_word: str | None = None) -> Seeded:
    """Create a tenant with an environment, a user, a daily workflow, failed and good ticks,
    an open alert with its history and the failing step's log, and a customer channel."""
    secret_word = secret_word or f"{tenant}-secret-log"
    with db.transaction() as store:
        t = store.catalog.upsert_tenant(tenant, now, display_name=tenant.capitalize() + " Inc")
        env = store.catalog.apply_environment(t.id, "default", None, 600, now).row
        user = store.catalog.apply_user(t.id, f"ops@{tenant}.test", f"ops@{tenant}.test", True, now).row
        wf = publish(store, t.id, "nightly", now, environment_id=env.id, publisher_id=user.id,
                     description=f"{tenant} nightly pipeline",
                     recipe={"steps": [{"name": "load", "kind": "python", "depends_on": [],
                                        "call": "tickwarden.examples_steps:noop", "params": {},
                                        "timeout_seconds": None}]})
        channel = store.outbox.upsert_notification_channel(tenant_id=t.id, name=f"{tenant}-alerts", kind="recording",
                                                    audience="customer", now=now)
    seeded = Seeded(tenant, t.id, "nightly", wf.id, env.id, channel_id=channel.id)
    ok = AttemptOutcome(status="succeeded")
    bad = AttemptOutcome(status="failed", error_category="connection", error="connection reset by peer",
                         failed_step="load", retryable=False, log_tail=f"loading\n{secret_word}\nconnection reset")
    for day, outcome in ((3, ok), (2, bad), (1, bad)):
        tick = now - timedelta(days=day)
        run = create_run(db, wf, tick, tick, budget=0)
        with db.transaction() as store:
            attempt = lease(store, f"w-{tenant}", tick, 60)[0]
            store.ledger.finish_attempt(attempt, f"w-{tenant}", outcome, tick + timedelta(minutes=3))
        seeded.run_ids.append(run.id)
    last_run = seeded.run_ids[-1]
    with db.connection() as conn, conn.transaction():
        attempt_id, run_tick = conn.execute(
            "SELECT id, run_scheduled_for FROM attempts WHERE run_id = %s", (last_run,)).fetchone()
        conn.execute(
            "INSERT INTO attempt_steps (attempt_id, run_scheduled_for, tenant_id, step, position, status, log, error)"
            " VALUES (%s, %s, %s, 'load', 0, 'failed', %s, 'connection reset by peer')",
            (attempt_id, run_tick, t.id, f"opening warehouse\n{secret_word}\nconnection reset by peer"))
        opened = now - timedelta(days=2) + timedelta(minutes=3)
        seeded.alert_id = conn.execute(
            "INSERT INTO alerts (tenant_id, workflow_id, status, first_severity, severity, owner, failure_count,"
            " cadence_seconds, escalation_multiplier, escalate_after, escalate_at, first_failure_at, last_failure_at,"
            " last_run_id, last_error_category, last_error, failed_step, opened_at)"
            " VALUES (%s, %s, 'open', 'critical', 'critical', 'engineering', 2, 86400, 1, 1, %s, %s, %s, %s,"
            " 'connection', 'connection reset by peer', 'load', %s) RETURNING id",
            (t.id, wf.id, opened + timedelta(days=1), opened, now - timedelta(days=1), last_run, opened),
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner, data)"
            " VALUES (%s, %s, 'opened', %s, 'critical', 'engineering', %s)",
            (t.id, seeded.alert_id, opened, Jsonb({"failures": 1})))
    return seeded


def api(base: str, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base, headers=headers, timeout=10)


__all__ = ["RecordingTransport", "Seeded", "api", "live_server", "make_token", "seed_tenant"]
