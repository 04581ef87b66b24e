"""The shape of every background loop.

A loop is an object with a `name` and a `run_once(now)` method that does one pass at
time `now` and returns when it next wants to run. The service calls passes on the
wall clock (`tickwarden.service`), the simulator on a virtual clock; both drive the
very same objects. A pass must be correct with any number of replicas of the same
loop running against the same database at once.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import datetime
from typing import Protocol, runtime_checkable


@runtime_checkable
class Loop(Protocol):
    name: str

    def run_once(self, now: datetime) -> datetime:
        """Do one pass at `now`; return the time of the next pass."""


def replica_id(role: str = "tickwarden") -> str:
    """Return an identity for this process that is unique across machines and restarts."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
