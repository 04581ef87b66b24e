"""Shared output helpers: JSON for machines, Rich for people."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from rich.console import Console

from tickwarden.clock import isoformat_z

console = Console(highlight=False)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return isoformat_z(value)
    if hasattr(value, "as_dict"):
        return value.as_dict()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def dumps(data: Any) -> str:
    return json.dumps(data, default=_default, indent=2, sort_keys=False)


def print_json(data: Any) -> None:
    print(dumps(data))
