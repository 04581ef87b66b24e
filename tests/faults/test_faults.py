"""Faults injected into a running deployment: nothing acknowledged is lost, nothing happens twice.

One deployment (2 control-plane replicas, 3 workers, a private PostgreSQL) serves the
module; each experiment spans one minute boundary of the every-minute workload,
injects its faults at seeded random moments around it, waits for every run to get
its verdict and every notification to go out, and then counts. The seed is printed
and taken from TICKWARDEN_FAULT_SEED, so a failure can be replayed.
"""

from __future__ import annotations

import os
import random
import time
from datetime import datetime, timedelta

import pytest

from tests.faults.cluster import (
    LEASE_SECONDS,
    Cluster,
    Figures,
    next_boundary,
    wait_until,
)
from tests.privatepg import available

pytestmark = [pytest.mark.faults, pytest.mark.slow,
              pytest.mark.skipif(not available(), reason="the PostgreSQL 15 server binaries are not installed")]

SEED = int(os.environ.get("TICKWARDEN_FAULT_SEED", "14"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    deployment = Cluster(tmp_path_factory.mktemp("faults"))
    try:
        yield deployment
    finally:
        deployment.close()


def _at(boundary: datetime, offset: float) -> None:
    wait_until(boundary + timedelta(seconds=offset))


def wait_for(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "the deployment did not get there in time"
        time.sleep(0.5)


def _report(figures: Figures, record_property) -> None:
    # Recorded on the test's report as well, so the summary has it under xdist too.
    record_property("faults", [figures.line(), *figures.notes[:20]])
    print(f"seed {SEED}: " + figures.line())
    assert figures.duplicates == 0 and figures.lost == 0, "; ".join(figures.notes[:10])


def test_killed_workers_and_replicas_lose_no_tick_and_repeat_none(cluster, record_property):
    rng = random.Random(SEED)
    figures = Figures("worker-kill", trials=1)
    boundary = next_boundary(lead=8)
    start = boundary - timedelta(seconds=30)
    for offset in sorted(rng.uniform(0.5, 10) for _ in range(3)):  # while the tick's steps are running
        _at(boundary, offset)
        busy = cluster.busy_workers()
        if busy:
            victim = rng.choice(busy)
            cluster.kill(cluster.workers, victim)
            figures.faults += 1
            cluster.start_worker(victim)
    replica = rng.choice(sorted(cluster.replicas))
    _at(boundary, rng.uniform(10, 15))
    cluster.kill(cluster.replicas, replica)
    figures.faults += 1
    cluster.start_replica(replica)
    cluster.settle(boundary)
    cluster.check(figures, start, boundary)
    _report(figures, record_property)
    assert figures.faults >= 2


def test_database_restarts_and_a_stop_longer_than_a_lease_lose_no_result(cluster, record_property):
    rng = random.Random(SEED + 1)
    figures = Figures("database-restart", trials=1)
    boundary = next_boundary(lead=8)
    start = boundary - timedelta(seconds=30)
    before = cluster.query("SELECT count(*) FROM attempts WHERE status = 'lost'")[0][0]
    _at(boundary, rng.uniform(-4, -1))
    cluster.pg.restart("immediate")  # just before the tick is recorded
    figures.faults += 1
    _at(boundary, rng.uniform(2, 4))  # while the tick's steps run: their results wait for the database
    cluster.pg.stop("immediate")
    time.sleep(LEASE_SECONDS + 3)
    cluster.pg.start()
    figures.faults += 1
    _at(boundary, rng.uniform(22, 26))
    cluster.pg.restart("immediate")
    figures.faults += 1
    cluster.settle(boundary)
    cluster.check(figures, start, boundary)
    # No worker died: an attempt reaped as lost is a result thrown away.
    lost_attempts = cluster.query("SELECT count(*) FROM attempts WHERE status = 'lost'")[0][0] - before
    figures.lost += lost_attempts
    if lost_attempts:
        figures.notes.append(f"{lost_attempts} attempt(s) of live workers reaped as lost")
    _report(figures, record_property)


def test_a_webhook_receiver_that_fails_then_recovers_gets_each_event_once_in_order(cluster, record_property):
    rng = random.Random(SEED + 2)
    figures = Figures("webhook-outage", trials=1)
    boundary = next_boundary(lead=8)
    start = boundary - timedelta(seconds=30)
    cluster.receiver.failing.set()
    figures.faults += 1
    cluster.marker.write_text("fail")  # the tick fails and opens an alert that cannot be delivered
    _at(boundary, 1)
    wait_for(lambda: cluster.query("SELECT count(*) FROM alerts WHERE status = 'open'")[0][0] == 1, 60)
    cluster.marker.unlink()
    cluster.cli("run-now", "acme/flaky")  # a success resolves it: a second event behind the first
    wait_for(lambda: cluster.query("SELECT count(*) FROM alerts WHERE status = 'resolved'")[0][0] == 1, 60)
    time.sleep(rng.uniform(2, 8))
    cluster.receiver.failing.clear()
    cluster.settle(boundary)
    cluster.check(figures, start, boundary)
    events = cluster.query("SELECT e.id, e.kind FROM alert_events e WHERE e.at >= %s ORDER BY e.id", (start,))
    accepted = cluster.receiver.accepted
    deliveries = [a["delivery"] for a in accepted]
    figures.duplicates += len(deliveries) - len(set(deliveries))
    kinds = [a["event"] for a in accepted]
    figures.lost += max(len(events) - len(set(deliveries)), 0)
    if kinds != [kind for _, kind in events]:
        figures.duplicates += 1  # out of order counts against the run, with a note
        figures.notes.append(f"delivered {kinds}, recorded {[kind for _, kind in events]}")
    assert [kind for _, kind in events] == ["opened", "resolved"], events
    assert cluster.receiver.refused >= 1
    _report(figures, record_property)
