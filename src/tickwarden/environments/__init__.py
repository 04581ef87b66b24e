"""Warm environments: long-lived execution processes per tenant project.

`process` runs one execution server (`runner.py`) and its watchdog; `pool` keeps a
worker's processes warm, wakes them on demand and stops them when idle.

The package's names load with the module that defines them, on first use: the command
line reads `MAX_LIVE` for its help without loading the pool and its database layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tickwarden.environments.pool import EnvironmentPool, Instance, IsolationError
    from tickwarden.environments.process import Aborted, EnvironmentFailed, EnvironmentProcess, WatchdogTimeout

# Warm environment processes a worker keeps by default (`tickwarden worker --max-environments`).
MAX_LIVE = 16

_HOMES = {
    "Aborted": "process",
    "EnvironmentFailed": "process",
    "EnvironmentPool": "pool",
    "EnvironmentProcess": "process",
    "Instance": "pool",
    "IsolationError": "pool",
    "WatchdogTimeout": "process",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "MAX_LIVE",
    "Aborted",
    "EnvironmentFailed",
    "EnvironmentPool",
    "EnvironmentProcess",
    "Instance",
    "IsolationError",
    "WatchdogTimeout",
]
