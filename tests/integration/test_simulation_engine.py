"""The simulator's engine: the worker's buffered writes reach the ledger before any pass reads them."""

from __future__ import annotations

from datetime import datetime, timedelta

from tickwarden.simulate import Simulation, parse_scenario
from tests.dbutil import TEST_URL

START = datetime.fromisoformat("2026-11-30T00:00:00+00:00")


def scenario(duration: int, faults: list[dict] | None = None, hours: float = 1, cron: str = "*/15 * * * *") -> dict:
    return {
        "name": "engine",
        "start": "2026-11-30T00:00:00Z",
        "end": (START + timedelta(hours=hours)).isoformat().replace("+00:00", "Z"),
        "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": "sync", "cron": cron, "duration": duration}],
        "faults": faults or [],
    }


def run(raw: dict):
    return Simulation(parse_scenario(raw, source="test"), url=TEST_URL).run()


def test_an_attempt_that_outlives_its_lease_is_kept_alive_by_its_heartbeats():
    # 200 s is more than three 60-second leases: only renewals written before each
    # reaper pass keep the reaper from taking the attempt as lost.
    outcome = run(scenario(duration=200))
    ended = [a for a in outcome.attempts if a["finished_at"] is not None]
    assert len(ended) >= 3
    assert [(a["number"], a["status"]) for a in ended] == [(1, "succeeded")] * len(ended)
    assert all(a["finished_at"] - a["started_at"] == timedelta(seconds=200) for a in ended)
    assert outcome.alerts == []


def test_a_crashed_worker_is_reaped_once_its_lease_runs_out_and_the_tick_is_retried():
    crash = {"workflow": "acme/sync", "start": "2026-11-30T01:00:10Z", "end": "2026-11-30T01:00:11Z",
             "mode": "crash", "error": "killed"}
    outcome = run(scenario(duration=30, faults=[crash], hours=2, cron="0 * * * *"))  # hourly: one retry
    tick = [a for a in outcome.attempts if a["scheduled_for"] == START + timedelta(hours=1)]
    assert [(a["number"], a["status"]) for a in tick] == [(1, "lost"), (2, "succeeded")]
    lost = tick[0]
    # the last renewal was at most 20 s before the crash; the lease is 60 s; the reaper passes every 15 s
    expired_by = START + timedelta(hours=1, seconds=10 + 60)
    assert expired_by - timedelta(seconds=20) < lost["finished_at"] <= expired_by + timedelta(seconds=15)


def test_an_outcome_is_judged_at_once_because_finishing_it_wakes_the_poller():
    fault = {"workflow": "acme/sync", "start": "2026-11-30T00:00:00Z", "end": "2026-11-30T01:30:00Z",
             "error": "table analytics.orders is stale", "retryable": False}
    outcome = run(scenario(duration=30, faults=[fault], hours=2))
    failed = [a for a in outcome.attempts if a["status"] == "failed"]
    assert failed, "the fault fails the ticks inside it"
    opened = outcome.alerts[0]["opened_at"]
    # the poller's own passes are at 15 s + k·30 s; the finish wakes it between them
    assert (opened - (START + timedelta(seconds=15))).total_seconds() % 30 != 0
    assert opened in [a["finished_at"] for a in failed]

def test_a_renewal_is_written_only_for_a_lease_reader_that_would_find_the_lease_run_out(monkeypatch):
    # 200-second attempts, heartbeats every 20 s on 60-second leases, and a workflow finishing
    # every minute beside them, which the poller judges: the ledger's lease is read only by the
    # reaper and the deadline detector, and only where it has run out.
    from tickwarden.simulate import engine
    from tickwarden.simulate.simulation import SimulationRepository

    raw = scenario(duration=200)
    raw["workflows"].append({"tenant": "acme", "name": "minutely", "cron": "* * * * *", "duration": 10})
    reading: list[tuple[str, datetime, dict[int, datetime]]] = []  # the pass, its instant, the leases written
    renewals: list[tuple[str, datetime, dict[int, datetime], dict]] = []
    finishes: list[dict] = []
    flush_for, worker_writes = engine.SimulatedWorker.flush_for, SimulationRepository.worker_writes

    def read(self, reader, now):
        reading.append((reader, now, dict(self.written_lease)))
        try:
            flush_for(self, reader, now)
        finally:
            reading.pop()

    def recorded(self, statements):
        for name, params in statements:
            if name == "simulation_renew_leases":
                renewals.append((*reading[-1], params) if reading else ("world", None, {}, params))
            elif "WITH reported AS" in name:  # ledger_finish_attempts, its months completed
                finishes.append(params)
        return worker_writes(self, statements)

    monkeypatch.setattr(engine.SimulatedWorker, "flush_for", read)
    monkeypatch.setattr(SimulationRepository, "worker_writes", recorded)
    outcome = run(raw)
    long = [a for a in outcome.attempts if a["workflow"] == "sync" and a["finished_at"] is not None]
    assert len(long) >= 3 and {a["status"] for a in outcome.attempts if a["finished_at"]} == {"succeeded"}
    for reader, now, leases, params in renewals:
        assert reader in ("deadlines", "lease-reaper", "world"), reader
        for attempt_id in params["attempt_ids"]:
            assert now is None or leases[attempt_id] <= now, "the lease it replaces runs past the pass"
    # The deadline detector reads the lease of an overdue run only: these runs end long before
    # their deadlines, so none of their renewals is written for it (nor for the reaper, which
    # has no crash to reap and never passes).
    assert not [r for r in renewals if r[0] == "deadlines"]
    # The simulator wakes the poller itself: the outcomes notify nobody.
    assert finishes and not any(params["wake"] for params in finishes)


def test_the_worker_knows_every_runs_deadline_as_the_ledger_holds_it(monkeypatch):
    # The renewals it writes for the deadline detector hang on it: ticks and manual runs,
    # mixed cadences and policies (the noise benchmark's fleet).
    from benchmarks.noise import START as NOISE, build
    from tickwarden.clock import isoformat_z
    from tickwarden.simulate import engine

    raw, _, _ = build(40, 1, 7)
    raw["end"] = isoformat_z(NOISE + timedelta(hours=8))
    managed = [f"{w['tenant']}/{w['name']}" for w in raw["workflows"] if w.get("kind", "managed") == "managed"]
    raw["manual_runs"] = [{"workflow": key, "at": isoformat_z(NOISE + timedelta(hours=2 + i, minutes=7))}
                          for i, key in enumerate(managed[:3])]
    known: dict[int, datetime | None] = {}
    in_ledger: dict[int, datetime] = {}
    run_once, collect = engine.SimulatedWorker.run_once, engine.Simulation._collect

    def leased(self, now):
        following = run_once(self, now)
        known.update(self.deadline)
        return following

    def collected(self, db, setup):
        with db.transaction() as store:
            rows = store.conn.execute(
                "SELECT a.id, r.deadline_at FROM attempts a JOIN runs r ON r.id = a.run_id AND a.started_at IS NOT NULL"
            ).fetchall()
        in_ledger.update((row[0], row[1]) for row in rows)
        return collect(self, db, setup)

    monkeypatch.setattr(engine.SimulatedWorker, "run_once", leased)
    monkeypatch.setattr(engine.Simulation, "_collect", collected)
    outcome = Simulation(parse_scenario(raw, source="test"), url=TEST_URL).run()
    assert any(r["manual"] for r in outcome.runs) and len(known) > 100
    assert known == in_ledger
