"""Warm environments: long-lived execution processes per tenant project.

`process` runs one execution server (`runner.py`) and its watchdog; `pool` keeps a
worker's processes warm, wakes them on demand and stops them when idle.

The package's names load with the module that defines them, on first use: the command
line reads `MAX_LIVE` for its help without loading the pool and its database layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickwarden.lazy import attributes

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

__getattr__ = attributes(__name__, _HOMES)


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
