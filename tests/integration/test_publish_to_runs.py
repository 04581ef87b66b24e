"""A published schedule runs from its next tick, through the API or `apply`, with every loop and no wake-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.helpers import lease
from tests.apiutil import api, live_server, make_token, seed_tenant
from tickwarden import catalog
from tickwarden.models import AttemptOutcome
from tickwarden.service import build_loops

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PUBLISHED = T0 + timedelta(seconds=30)
FIVE_MINUTES_LATER = PUBLISHED + timedelta(minutes=5)
STEPS = [{"name": "check", "kind": "sql", "query": "select 1", "database": "secret:WAREHOUSE"}]

FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: every-minute
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "* * * * *", starting_deadline_seconds: 60}
    steps: [{name: a, kind: python, call: "tickwarden.examples_steps:extract"}]
"""


class Fleet:
    """Every loop of one replica, each run at the wake-up its last pass asked for, and a worker that succeeds.

    Nobody listens for NOTIFY here: a loop runs only when its own schedule says so.
    """

    def __init__(self, db, start: datetime):
        self.db = db
        self.loops = build_loops(db, "replica-1")
        self.due = {loop.name: start for loop in self.loops}

    def run(self, start: datetime, end: datetime, step: timedelta = timedelta(seconds=5)) -> None:
        now = start
        while now <= end:
            for loop in self.loops:
                if self.due[loop.name] <= now:
                    self.due[loop.name] = loop.run_once(now)
            with self.db.transaction() as store:
                for attempt in lease(store, "worker-1", now, 60, limit=100):
                    store.ledger.finish_attempt(attempt, "worker-1", AttemptOutcome(status="succeeded"), now)
            now += step


def outcome(db, workflow: str) -> tuple[list[str], int]:
    with db.connection() as conn:
        statuses = [row[0] for row in conn.execute(
            "SELECT r.status FROM runs r JOIN workflows w ON w.id = r.workflow_id"
            " WHERE w.name = %s AND NOT r.manual ORDER BY r.scheduled_for", (workflow,)).fetchall()]
        alerts = conn.execute("SELECT count(*) FROM alerts a JOIN workflows w ON w.id = a.workflow_id"
                              " WHERE w.name = %s", (workflow,)).fetchone()[0]
    return statuses, alerts


def test_a_schedule_published_through_the_api_runs_every_tick_and_raises_no_false_alarm(db, clock):
    clock.set(T0)
    seed_tenant(db, T0, "acme")
    token = make_token(db, T0, tenant="acme")
    fleet = Fleet(db, T0)
    fleet.run(T0, PUBLISHED - timedelta(seconds=5))  # every loop has made its first pass before the publish
    clock.set(PUBLISHED)
    body = {"environment": "default", "publisher": "ops@acme.test",
            "schedule": {"cron": "* * * * *", "starting_deadline_seconds": 60}, "steps": STEPS}
    with live_server(db, clock) as server, api(server, token) as client:
        published = client.put("/api/tenants/acme/workflows/minutely", json=body)
        assert published.status_code == 201, published.text
    fleet.run(PUBLISHED, FIVE_MINUTES_LATER)
    assert outcome(db, "minutely") == (["succeeded"] * 5, 0)


def test_a_schedule_applied_from_a_file_runs_every_tick_without_a_wake_up(db, tmp_path):
    fleet = Fleet(db, T0)
    fleet.run(T0, PUBLISHED - timedelta(seconds=5))
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, PUBLISHED)
    fleet.run(PUBLISHED, FIVE_MINUTES_LATER)
    assert outcome(db, "every-minute") == (["succeeded"] * 5, 0)


def test_a_resumed_schedule_never_counts_the_ticks_it_slept_through_as_missed(db, tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, PUBLISHED)
    fleet = Fleet(db, PUBLISHED)
    fleet.run(PUBLISHED, T0 + timedelta(minutes=2, seconds=10))
    catalog.pause(db, "acme", "every-minute", T0 + timedelta(minutes=2, seconds=10))
    fleet.run(T0 + timedelta(minutes=2, seconds=15), T0 + timedelta(minutes=9, seconds=40))
    catalog.resume(db, "acme", "every-minute", T0 + timedelta(minutes=9, seconds=40))
    fleet.run(T0 + timedelta(minutes=9, seconds=45), T0 + timedelta(minutes=13, seconds=30))
    # 12:01 and 12:02 before the pause, 12:10 to 12:13 after the resume; nothing in between is missed
    assert outcome(db, "every-minute") == (["succeeded"] * 6, 0)
