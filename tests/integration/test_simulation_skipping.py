"""Skipping idle passes changes nothing: the same scenario gives the same ledger with and without it.

The simulator skips the passes the ledger proves idle (`IdlePasses`) and wakes each
loop where its chain of idle passes first reaches work. Every run, attempt, alert,
alert event and delivered notification, and every column of the ledger's rows (ids,
claim times, leases, watermarks) must equal what stepping every loop at its
interval produces; but an attempt's `heartbeat_at`, which no pass reads: the simulated
worker writes a renewal only for a pass that reads leases and would find the lease run
out (`SimulatedWorker.flush`), so which renewal an attempt shows last depends on which
passes ran.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from benchmarks.noise import START, build
from tests.dbutil import TEST_URL
from tickwarden.clock import isoformat_z
from tickwarden.simulate import Simulation, get_policy, load_scenario, parse_scenario
from tickwarden.simulate.engine import SimulationOutcome

SCENARIOS = Path(__file__).resolve().parents[1] / "acceptance" / "scenarios"


# Every column of every row these tables hold when the simulation ends.
TABLES = {"runs": "id", "attempts": "id", "alerts": "id", "alert_events": "id", "notification_outbox": "id",
          "notification_threads": "alert_id, channel_id", "tick_audits": "schedule_id"}


class Recorded(Simulation):
    """A simulation that also keeps its whole ledger, not only the read-outs of `--json`."""

    def _collect(self, db, setup) -> SimulationOutcome:
        outcome = super()._collect(db, setup)
        with db.transaction() as store:
            for table, order in TABLES.items():
                cursor = store.conn.execute(f"SELECT * FROM {table} ORDER BY {order}")
                rows = cursor.fetchall()  # first: in pipeline mode the description comes with the rows
                names = [column.name for column in cursor.description]
                outcome.extra[table] = [{name: value for name, value in zip(names, row, strict=True)
                                         if name != "heartbeat_at"} for row in rows]
        return outcome


def ledger(outcome: SimulationOutcome) -> dict[str, list[dict]]:
    return {"runs": outcome.runs, "attempts": outcome.attempts, "alerts": outcome.alerts,
            "alert_events": outcome.alert_events, "notifications": outcome.notifications,
            **{f"table {table}": outcome.extra[table] for table in TABLES}}


def both(scenario, policy: str = "tickwarden") -> tuple[Simulation, dict, dict]:
    chosen = get_policy(policy)
    kwargs = {"url": TEST_URL, "overrides": chosen.overrides, "replace_policy": chosen.replace_policy}
    skipping = Recorded(scenario, **kwargs)
    skipped = ledger(skipping.run())
    stepped = ledger(Recorded(scenario, skip_idle=False, **kwargs).run())
    return skipping, skipped, stepped


@pytest.mark.parametrize(("name", "policy"), [("everything", "tickwarden"), ("checkins", "naive")])
def test_a_scenario_gives_the_same_ledger_with_and_without_skipping(name, policy):
    skipping, skipped, stepped = both(load_scenario(SCENARIOS / f"{name}.yaml"), policy)
    assert stepped["runs"] and stepped["attempts"]
    for part in stepped:
        assert skipped[part] == stepped[part], part
    assert skipping.idle is not None and skipping.idle.skipped > 0


def test_a_fleet_with_crashes_outages_and_alerts_gives_the_same_ledger():
    raw, _, _ = build(40, 1, 7)
    raw["end"] = isoformat_z(START + timedelta(hours=14))
    raw["manual_runs"] = [m for m in raw["manual_runs"] if m["at"] <= raw["end"]]
    skipping, skipped, stepped = both(parse_scenario(raw, source="test"))
    assert stepped["alerts"] and stepped["notifications"], "the fleet must exercise alerting"
    assert any(a["status"] == "lost" for a in stepped["attempts"]), "and crashes"
    for part in stepped:
        assert skipped[part] == stepped[part], part
    assert skipping.idle is not None and skipping.idle.skipped > 0


def test_the_simulators_own_writes_make_the_worker_poller_and_reaper_dues_exact(monkeypatch):
    """The reaper's due is the simulated worker's, exact: every pass after the first reaps something."""
    from tickwarden.reaper import LeaseReaper

    passes: list[int] = []
    original = LeaseReaper.run_once

    def counted(self, now):
        following = original(self, now)
        passes.append(len(self.last_reaped))
        return following

    monkeypatch.setattr(LeaseReaper, "run_once", counted)
    raw, _, _ = build(40, 1, 7)
    raw["end"] = isoformat_z(START + timedelta(hours=14))
    raw["manual_runs"] = []
    simulation = Simulation(parse_scenario(raw, source="test"), url=TEST_URL)
    outcome = simulation.run()
    lost = [a for a in outcome.attempts if a["status"] == "lost"]
    assert lost, "the fleet must crash"
    first, *rest = passes  # every loop's first pass runs
    assert rest and all(reaped for reaped in rest), passes
    assert sum(passes) == len(lost)
    # Without a world event (a manual run here), the worker, the poller and the reaper
    # know their work from the simulator's own writes: they never look at the ledger.
    assert simulation.idle is not None
    assert {name: simulation.idle.looks[name] for name in ("worker", "poller", "lease-reaper")} == {
        "worker": 0, "poller": 0, "lease-reaper": 0}
    assert any(a["number"] > 1 for a in outcome.attempts), "retries are queued for later"


def test_the_escalation_clocks_and_the_notifiers_looks_are_sent_ahead_and_cost_no_wait_of_their_own(monkeypatch):
    """Their looks go out unread when something leaves them stale and are read when they wake."""
    from tickwarden.simulate import engine

    waited: list[str] = []
    original = engine.SimulationRepository.next_due

    def read_at_once(self, loop, now, kinds):
        waited.append(loop)
        return original(self, loop, now, kinds)

    monkeypatch.setattr(engine.SimulationRepository, "next_due", read_at_once)
    raw, _, _ = build(40, 1, 7)
    raw["end"] = isoformat_z(START + timedelta(hours=14))
    raw["manual_runs"] = [m for m in raw["manual_runs"] if m["at"] <= raw["end"]]  # each touches every loop
    simulation = Simulation(parse_scenario(raw, source="test"), url=TEST_URL)
    outcome = simulation.run()
    assert outcome.notifications, "the fleet must exercise alerting"
    assert simulation.idle is not None
    assert simulation.idle.looks["escalation"] > 0 and simulation.idle.looks["notifier"] > 0
    assert not {"escalation", "notifier"} & set(waited), waited


def test_an_alert_the_evaluation_opens_or_counts_up_leaves_the_escalation_clock_no_look_to_take():
    """The evaluation says when its alerts may first be the clock's work (`EvaluationReport.escalation_due`)."""
    scenario = parse_scenario({
        "start": "2026-11-30T00:00:00Z", "end": "2026-11-30T02:00:00Z", "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": f"sync-{d}", "cron": "*/5 * * * *", "duration": d} for d in (20, 40)],
        "faults": [{"workflow": "acme/sync-40", "start": "2026-11-30T00:30:00Z", "end": "2026-11-30T01:20:00Z",
                    "error": "table analytics.orders is stale", "retryable": False}],
    }, source="test")
    skipping, skipped, stepped = both(scenario)
    for part in stepped:
        assert skipped[part] == stepped[part], part
    [alert] = skipped["alerts"]  # opened, counted up to escalation by failures, resolved
    assert (alert["severity"], alert["status"]) == ("critical", "resolved")
    # looks only after the clock's own passes: none for the pass that opened the alert or those that
    # counted its failures (each left the clock stale before: 9 looks in all)
    assert skipping.idle is not None and skipping.idle.looks["escalation"] <= 2, skipping.idle.looks


def test_a_manual_run_makes_the_worker_due_at_once_without_a_look():
    """A manual run queues its first attempt when requested: the worker leases it then, and never looks."""
    raw, _, _ = build(40, 2, 7)
    raw["end"] = isoformat_z(START + timedelta(days=2))
    assert raw["manual_runs"], "the fleet must have manual runs"
    simulation = Simulation(parse_scenario(raw, source="test"), url=TEST_URL)
    outcome = simulation.run()
    manual = {run["id"] for run in outcome.runs if run["manual"]}
    assert len(manual) == len(raw["manual_runs"])
    firsts = [a for a in outcome.attempts if a["run_id"] in manual and a["number"] == 1]
    assert firsts and all(a["started_at"] == a["queued_at"] for a in firsts)  # leased at the request
    assert simulation.idle is not None and simulation.idle.looks["worker"] == 0


def test_an_evaluation_that_only_counts_failures_up_wakes_no_notifier(monkeypatch):
    """A `failed` event is history only: with no outbox row to deliver, the notifier is not woken for it.

    The service's notifier is woken by the NOTIFY of new outbox rows; the simulator wakes it as
    that would, so every pass it runs after its first has a delivery to make.
    """
    from tickwarden.notifier import Notifier
    from tickwarden.poller import OutcomePoller

    passes: list[int] = []
    counted_up: list[int] = []
    notify, poll = Notifier.run_once, OutcomePoller.run_once

    def delivering(self, now):
        following = notify(self, now)
        passes.append(self.last_pass.sent)
        return following

    def polling(self, now):
        following = poll(self, now)
        evaluation = self.last.evaluation
        if evaluation.updated and not (evaluation.opened or evaluation.escalated or evaluation.resolved):
            counted_up.append(evaluation.notified)
        return following

    monkeypatch.setattr(Notifier, "run_once", delivering)
    monkeypatch.setattr(OutcomePoller, "run_once", polling)
    raw, _, _ = build(40, 1, 7)
    raw["end"] = isoformat_z(START + timedelta(hours=14))
    raw["manual_runs"] = []
    outcome = Simulation(parse_scenario(raw, source="test"), url=TEST_URL).run()
    assert outcome.notifications, "the fleet must exercise alerting"
    assert counted_up and not any(counted_up), "and count failures up on open alerts, which notify nobody"
    first, *rest = passes  # every loop's first pass runs
    assert rest and all(rest), passes
