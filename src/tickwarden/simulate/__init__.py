"""Simulation: the service's passes on a virtual clock, over a scenario or recorded history.

The package's names load with the module that defines them, on first use: the policies
(which the command line's help lists) without the engine and its database layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tickwarden.lazy import attributes

if TYPE_CHECKING:
    from tickwarden.simulate.engine import Simulation, SimulationOutcome
    from tickwarden.simulate.policies import POLICIES, get_policy
    from tickwarden.simulate.scenario import Scenario, load_scenario, parse_scenario

_HOMES = {
    "POLICIES": "policies",
    "Scenario": "scenario",
    "Simulation": "engine",
    "SimulationOutcome": "engine",
    "get_policy": "policies",
    "load_scenario": "scenario",
    "parse_scenario": "scenario",
}

__getattr__ = attributes(__name__, _HOMES)


def run_policy(scenario: Scenario, policy_name: str = "tickwarden", **kwargs: Any) -> SimulationOutcome:
    """Simulate `scenario` under a named policy and apply that policy's message rule."""
    from tickwarden.simulate.engine import Simulation
    from tickwarden.simulate.policies import apply_message_rule, get_policy

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
