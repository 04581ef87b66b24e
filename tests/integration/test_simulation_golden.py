"""The simulator's output is pinned: the same scenario gives the same `simulate --json`, byte for byte.

A change that only makes the simulator faster (fewer statements per pass, passes not
run, set-up work remembered) must leave every run, alert and notification exactly as
it was. The documents in `golden/` were written by the simulator before such changes;
each test runs the scenario again and compares the whole document.

A change that is meant to alter outcomes (a new profile default, a new alert rule)
rewrites them on purpose, and the diff of the files is then the review of what changed:

    TICKWARDEN_WRITE_GOLDEN=1 .venv/bin/python -m pytest tests/integration/test_simulation_golden.py
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from benchmarks.noise import START, build
from tests.dbutil import TEST_URL
from tickwarden.clock import isoformat_z
from tickwarden.simulate import Scenario, load_scenario, parse_scenario, run_policy
from tickwarden.simulate.report import to_json

GOLDEN = Path(__file__).resolve().parent / "golden"
ACCEPTANCE = Path(__file__).resolve().parents[1] / "acceptance" / "scenarios"
SEEDS = Path(__file__).resolve().parents[2] / "src" / "tickwarden" / "scenarios"


def fleet(workflows: int, hours: int) -> Scenario:
    """The noise benchmark's fleet (mixed cadences, crashes, trigger outages, manual runs) over `hours`."""
    raw, _, _ = build(workflows, max(1, (hours + 23) // 24), 7)
    raw["end"] = isoformat_z(START + timedelta(hours=hours))
    raw["manual_runs"] = [m for m in raw["manual_runs"] if m["at"] <= raw["end"]]
    return parse_scenario(raw, source="golden fleet")


def document(scenario: Scenario, policy: str) -> str:
    """The `simulate --json` document, one run, alert or notification a line (so that a diff reads)."""
    doc = to_json(run_policy(scenario, policy, url=TEST_URL))
    lines = [json.dumps({"scenario": doc["scenario"]})]
    for part in ("runs", "alerts", "notifications"):
        lines.append(json.dumps(part))
        lines.extend(json.dumps(item, sort_keys=True) for item in doc[part])
    return "\n".join(lines) + "\n"


CASES = {
    "fleet-80x26h-tickwarden": lambda: (fleet(80, 26), "tickwarden"),
    "everything-tickwarden": lambda: (load_scenario(ACCEPTANCE / "everything.yaml"), "tickwarden"),
    "checkins-naive": lambda: (load_scenario(ACCEPTANCE / "checkins.yaml"), "naive"),
    "seed-genuine-defect-tickwarden": lambda: (load_scenario(SEEDS / "seed-genuine-defect.yaml"), "tickwarden"),
    "seed-transient-fault-tickwarden": lambda: (load_scenario(SEEDS / "seed-transient-fault.yaml"), "tickwarden"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_scenario_gives_its_pinned_document(case):
    scenario, policy = CASES[case]()
    produced = document(scenario, policy)
    path = GOLDEN / f"{case}.jsonl"
    if os.environ.get("TICKWARDEN_WRITE_GOLDEN") == "1":
        path.write_text(produced, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    assert expected.count("\n") > 10, "the pinned document holds runs"
    if produced != expected:
        made, pinned = produced.splitlines(), expected.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(made, pinned, strict=False)) if a != b), min(len(made), len(pinned)))
        pytest.fail(f"{case}: the document differs from the pinned one from line {first + 1} ({len(made)} lines "
                    f"produced, {len(pinned)} pinned): {made[first:first + 1]} != {pinned[first:first + 1]}")
