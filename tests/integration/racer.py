"""A separate process that races others on one ledger operation (see test_races.py).

usage: python racer.py URL SCHEMA ACTION ARG LOCK_KEY
Waits on a shared advisory lock the test holds, so that every racer starts together.
Prints a JSON result on stdout.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import psycopg

from tests.helpers import lease
from tickwarden.db import Database
from tickwarden.store import TickRequest


def main() -> None:
    url, schema, action, arg, lock_key = sys.argv[1:6]
    db = Database(url, schema=schema, min_size=1, max_size=1)
    now = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    with psycopg.connect(url) as gate:
        print("ready", file=sys.stderr, flush=True)
        gate.execute("SELECT pg_advisory_lock_shared(%s)", (int(lock_key),))
    if action == "create-tick":
        workflow_id, tenant_id = (int(x) for x in arg.split(","))
        with db.transaction() as store:
            created = store.ledger.create_tick_runs(
                [TickRequest(tenant_id, workflow_id, now, 2, now + timedelta(hours=3))], now
            )
        print(json.dumps({"created": [r.id for r in created]}))
    elif action == "lease":
        leased = []
        for _ in range(int(arg)):
            with db.transaction() as store:
                leased += [a.id for a in lease(store, f"racer-{id(db)}", now, 60, limit=1)]
        print(json.dumps({"leased": leased}))
    db.close()


if __name__ == "__main__":
    main()
