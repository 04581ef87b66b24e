"""Ready-made python steps shipped with tickwarden, for examples and smoke tests.

Call them from a recipe as `tickwarden.environments.steps:<name>` in an environment
whose interpreter has tickwarden installed (the default one does).
"""

from __future__ import annotations

import time
from typing import Any


def echo(params: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Return the parameters and the names of the upstream outputs: proves the graph wiring."""
    print(f"echo: {len(params)} params, inputs from {sorted(inputs) or 'no step'}")
    return {"params": params, "inputs": sorted(inputs)}


def summarize(params: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Add up the row counts reported by upstream sql steps."""
    rows = sum(int(v.get("rows", 0)) for v in inputs.values() if isinstance(v, dict))
    print(f"summarize: {rows} rows from {len(inputs)} upstream steps")
    if params.get("min_rows") is not None and rows < int(params["min_rows"]):
        raise ValueError(f"expected at least {params['min_rows']} rows, got {rows}")
    return {"rows": rows}


def sleep(params: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Wait `seconds` (default 1): a stand-in for slow work, and a way to try the watchdog."""
    seconds = float(params.get("seconds", 1))
    time.sleep(seconds)
    return {"slept": seconds}
