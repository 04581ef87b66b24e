"""Simulation: the service's passes on a virtual clock, over a scenario or recorded history."""

from __future__ import annotations

from typing import Any

from tickwarden.simulate.engine import Simulation, SimulationOutcome
from tickwarden.simulate.policies import POLICIES, apply_message_rule, get_policy
from tickwarden.simulate.scenario import Scenario, load_scenario, parse_scenario


def run_policy(scenario: Scenario, policy_name: str = "tickwarden", **kwargs: Any) -> SimulationOutcome:
    """Simulate `scenario` under a named policy and apply that policy's message rule."""
    policy = get_policy(policy_name)
    if policy.overrides:
        kwargs.setdefault("overrides", policy.overrides)
        kwargs.setdefault("replace_policy", policy.replace_policy)
    outcome = Simulation(scenario, **kwargs).run()
    return apply_message_rule(outcome, policy)


__all__ = [
    "POLICIES",
    "Scenario",
    "Simulation",
    "SimulationOutcome",
    "get_policy",
    "load_scenario",
    "parse_scenario",
    "run_policy",
]
