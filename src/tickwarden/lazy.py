"""Names of a package that load with the module defining them, on first use.

A package whose modules pull in heavy layers (the database, the engine) can keep its
public names while a caller that needs only a constant, or the command line's help,
loads none of them. A name outside the map is an AttributeError, as on any module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: each name in `homes` read from its submodule."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home}"), name)

    return __getattr__
