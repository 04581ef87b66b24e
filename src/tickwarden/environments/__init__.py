"""Warm environments: long-lived execution processes per tenant project.

`process` runs one execution server (`runner.py`) and its watchdog; `pool` keeps a
worker's processes warm, wakes them on demand and stops them when idle.
"""

from tickwarden.environments.pool import EnvironmentPool, Instance, IsolationError
from tickwarden.environments.process import Aborted, EnvironmentFailed, EnvironmentProcess, WatchdogTimeout

__all__ = [
    "Aborted",
    "EnvironmentFailed",
    "EnvironmentPool",
    "EnvironmentProcess",
    "Instance",
    "IsolationError",
    "WatchdogTimeout",
]
