"""The read-out of a simulation's ledger: the attempts as the joined, ordered query gave them, made only when read."""

from __future__ import annotations

from datetime import timedelta

from benchmarks.noise import START, build
from tests.dbutil import TEST_URL
from tickwarden.clock import isoformat_z
from tickwarden.simulate import Simulation, get_policy, parse_scenario, run_policy
from tickwarden.simulate.engine import SimulationOutcome
from tickwarden.simulate.policies import apply_message_rule

# What `simulation_attempts` read before the read-out joined and ordered the attempts itself.
JOINED = """
SELECT t.name AS tenant, w.name AS workflow, a.run_id, a.number, a.status, a.queued_at, a.started_at,
       a.finished_at, a.error, a.error_category, r.scheduled_for, r.manual
  FROM attempts a
  JOIN runs r ON r.id = a.run_id
  JOIN workflows w ON w.id = a.workflow_id
  JOIN tenants t ON t.id = a.tenant_id
 ORDER BY coalesce(a.finished_at, a.queued_at), a.id
"""


class Joined(Simulation):
    """A simulation that also reads its attempts with the joined query, into `extra`."""

    def _collect(self, db, setup) -> SimulationOutcome:
        outcome = super()._collect(db, setup)
        with db.transaction() as store:
            cursor = store.conn.execute(JOINED)
            rows = cursor.fetchall()  # first: in pipeline mode the description comes with the rows
            names = [column.name for column in cursor.description]
            outcome.extra["joined"] = [dict(zip(names, row, strict=True)) for row in rows]
        return outcome


def fleet(workflows: int, hours: int):
    """The noise fleet (retries, crashes, manual runs, trigger outages) over `hours`."""
    raw, _, _ = build(workflows, 1, 3)
    raw["end"] = isoformat_z(START + timedelta(hours=hours))
    raw["manual_runs"] = [m for m in raw["manual_runs"] if m["at"] <= raw["end"]]
    return parse_scenario(raw, source="read-out")


def test_the_attempts_are_those_of_the_joined_query_in_its_order():
    outcome = Joined(fleet(60, 20), url=TEST_URL).run()
    assert len(outcome.extra["joined"]) > 500
    assert any(a["number"] > 1 for a in outcome.attempts), "retries are read"
    assert any(a["manual"] for a in outcome.attempts), "manual runs' attempts are read"
    assert outcome.attempts == outcome.extra["joined"]


def test_the_attempts_are_made_at_their_first_read_and_once():
    made = []

    def maker() -> list[dict]:
        made.append(1)
        return [{"run_id": 1, "number": 1}]

    outcome = SimulationOutcome(scenario=fleet(1, 1), runs=[], attempts=maker, alerts=[], alert_events=[],
                                notifications=[])
    assert made == []
    assert outcome.attempts == [{"run_id": 1, "number": 1}]
    assert outcome.attempts is outcome.attempts
    assert made == [1]


def test_a_policys_message_rule_keeps_the_attempts_unmade_until_read():
    outcome = run_policy(fleet(20, 6), "tickwarden", url=TEST_URL)
    assert callable(outcome.attempts_maker), "the read-out leaves the attempts to be made"
    naive = apply_message_rule(outcome, get_policy("naive"))
    assert callable(naive.attempts_maker)
    assert naive.attempts == outcome.attempts and len(naive.attempts) > 50
