"""Recipe graphs as the worker executes them: parsed steps, dependency order, skips.

Files are validated when they are applied (`workflow_file`); the worker still
refuses a stored recipe it cannot execute, because a row may have been written by
an older version or by hand. Such a recipe is a `config` failure, never retried.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("python", "sql")
CALL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
# `secret:NAME` (the tenant's own); `env:NAME` only where the platform maps it (see `secrets`).
SECRET_REF = re.compile(r"^(secret:[A-Za-z_][A-Za-z0-9_]{0,63}|env:[A-Za-z_][A-Za-z0-9_]*)$")


class RecipeError(Exception):
    """The stored recipe cannot be executed."""


@dataclass(frozen=True)
class Step:
    name: str
    kind: str
    depends_on: tuple[str, ...] = ()
    call: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    query: str | None = None
    database: str | None = None
    timeout_seconds: int | None = None
    secrets: tuple[str, ...] = ()

    def references(self) -> tuple[str, ...]:
        """Every secret reference the step declares."""
        return (self.database,) + self.secrets if self.database else self.secrets

    def request(self) -> dict[str, Any]:
        """Return the step as sent to an environment (the secret stays a reference)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "call": self.call,
            "params": self.params,
            "query": self.query,
        }


@dataclass(frozen=True)
class Recipe:
    steps: tuple[Step, ...]

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)


def parse_recipe(raw: Mapping[str, Any] | None) -> Recipe:
    """Turn a stored recipe into steps in execution order, or raise RecipeError."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("steps"), list):
        raise RecipeError("the stored recipe has no list of steps")
    steps: list[Step] = []
    seen: set[str] = set()
    for index, item in enumerate(raw["steps"]):
        steps.append(_parse_step(item, index))
        if steps[-1].name in seen:
            raise RecipeError(f"step {steps[-1].name!r} is declared twice")
        seen.add(steps[-1].name)
    if not steps:
        raise RecipeError("the recipe has no steps")
    for s in steps:
        for dep in s.depends_on:
            if dep not in seen:
                raise RecipeError(f"step {s.name!r} depends on unknown step {dep!r}")
    return Recipe(tuple(topological_order(steps)))


def _parse_step(item: object, index: int) -> Step:
    if not isinstance(item, Mapping):
        raise RecipeError(f"step #{index + 1} is not a mapping")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise RecipeError(f"step #{index + 1} has no name")
    kind = item.get("kind")
    if kind not in KINDS:
        raise RecipeError(f"step {name!r} has unknown kind {kind!r}")
    depends = item.get("depends_on") or []
    if not isinstance(depends, list) or not all(isinstance(d, str) for d in depends):
        raise RecipeError(f"step {name!r} has a depends_on that is not a list of step names")
    timeout = item.get("timeout_seconds")
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1):
        raise RecipeError(f"step {name!r} has a timeout_seconds that is not a positive integer")
    params = item.get("params") or {}
    if not isinstance(params, Mapping):
        raise RecipeError(f"step {name!r} has params that are not a mapping")
    if kind == "python":
        call = item.get("call")
        if not isinstance(call, str) or not CALL.match(call):
            raise RecipeError(f"step {name!r} needs a call of the form 'package.module:function'")
        declared = item.get("secrets") or []
        if not isinstance(declared, list) or not all(isinstance(r, str) and SECRET_REF.match(r) for r in declared):
            raise RecipeError(f"step {name!r} has secrets that are not a list of references such as 'secret:NAME'")
        return Step(name, kind, tuple(depends), call=call, params=dict(params), timeout_seconds=timeout,
                    secrets=tuple(declared))
    query = item.get("query")
    database = item.get("database")
    if not isinstance(query, str) or not query.strip():
        raise RecipeError(f"step {name!r} has no query")
    if not isinstance(database, str) or not SECRET_REF.match(database):
        raise RecipeError(f"step {name!r} needs a database secret reference such as 'secret:NAME'")
    return Step(name, kind, tuple(depends), query=query, database=database, timeout_seconds=timeout)


def topological_order(steps: Iterable[Step]) -> list[Step]:
    """Order steps so each comes after its dependencies; ties keep declaration order.

    Kahn's algorithm with the declaration index as priority, so the order is stable
    and a reader of the file can predict it. A cycle raises RecipeError.
    """
    steps = list(steps)
    position = {s.name: i for i, s in enumerate(steps)}
    waiting = {s.name: len(set(s.depends_on)) for s in steps}
    dependants: dict[str, list[str]] = {s.name: [] for s in steps}
    for s in steps:
        for dep in set(s.depends_on):
            dependants[dep].append(s.name)
    ready = [position[name] for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    ordered: list[Step] = []
    while ready:
        step = steps[heapq.heappop(ready)]
        ordered.append(step)
        for child in dependants[step.name]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, position[child])
    if len(ordered) != len(steps):
        stuck = sorted(name for name, count in waiting.items() if count > 0)
        raise RecipeError(f"the steps {', '.join(stuck)} form a dependency cycle")
    return ordered


def blocked_by(step: Step, failed: set[str]) -> str | None:
    """Return the first dependency of `step` that did not succeed, if any."""
    for dep in step.depends_on:
        if dep in failed:
            return dep
    return None
