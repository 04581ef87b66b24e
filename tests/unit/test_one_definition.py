"""One definition each: a workflow's default timeout and the cadence of a workflow without a schedule."""

from __future__ import annotations

from tickwarden import catalog, profile


def test_the_timeout_rule_is_the_workflows_own_else_its_cadences_default_and_unscheduled_is_daily():
    assert profile.UNSCHEDULED_CADENCE_SECONDS == 86400
    assert profile.timeout_for(None, None) == profile.default_timeout_seconds(86400) == 3600
    assert profile.timeout_for(None, 300) == 300
    assert profile.timeout_for(None, 10) == 60
    assert profile.timeout_for(45, None) == 45
    # The run deadline a tick is given assumes the same timeout the worker's watchdog enforces.
    assert catalog.budget_for(300, {}, True, None).timeout_seconds == profile.timeout_for(None, 300)
    assert catalog.budget_for(300, {}, True, 45).timeout_seconds == 45


def test_a_class_name_means_one_thing():
    """Two top-level classes of one name are two meanings a reader must tell apart by import path."""
    import ast
    from collections import defaultdict
    from pathlib import Path

    import tickwarden

    defined: dict[str, list[str]] = defaultdict(list)
    for path in Path(tickwarden.__file__).parent.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                defined[node.name].append(path.name)
    colliding = {name for name, where in defined.items() if len(where) > 1}
    assert len(defined["Heartbeat"]) == len(defined["AlertView"]) == 1
    assert not colliding, colliding
