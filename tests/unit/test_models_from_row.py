"""Rows become dataclasses: every field from its column, extra columns ignored, missing ones left to their defaults."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, InitVar, dataclass

import pytest

from tests.dataclass_shapes import Checked, Derived, Slotted
from tickwarden.models import from_row


@dataclass(frozen=True)
class Pair:
    left: int
    right: str = "default"


@dataclass(frozen=True)
class Single:
    only: int


def test_a_row_with_every_field_and_more_builds_the_dataclass_in_field_order():
    assert from_row(Pair, {"right": "r", "extra": 1, "left": 3}) == Pair(3, "r")
    assert from_row(Single, {"only": 5, "extra": 1}) == Single(5)


def test_a_field_missing_from_the_row_keeps_its_default_and_a_required_one_fails():
    assert from_row(Pair, {"left": 3, "extra": 1}) == Pair(3)
    with pytest.raises(TypeError):
        from_row(Pair, {"right": "r"})


@dataclass(frozen=True)
class WithInitVar:
    value: int
    scale: InitVar[int]

    def __post_init__(self, scale: int) -> None:
        object.__setattr__(self, "value", self.value * scale)


def test_an_instance_built_from_a_row_is_the_one_its_init_builds_and_as_frozen():
    made = from_row(Pair, {"right": "r", "left": 3})
    assert made == Pair(3, "r") and hash(made) == hash(Pair(3, "r")) and repr(made) == repr(Pair(3, "r"))
    assert made.__class__ is Pair and vars(made) == vars(Pair(3, "r"))
    with pytest.raises(FrozenInstanceError):
        made.left = 4  # type: ignore[misc]


@pytest.mark.parametrize("cls", [Checked, Derived, Slotted])
def test_a_class_whose_init_does_more_than_store_its_fields_is_built_by_its_init(cls):
    made = from_row(cls, {"value": 1, "extra": 2})
    assert made == cls(1) and made.__class__ is cls
    with pytest.raises(ValueError):
        from_row(Checked, {"value": -1})


def test_a_class_with_an_init_only_variable_is_built_by_its_init():
    with pytest.raises(TypeError):  # its init wants `scale`, which no field reads from the row
        from_row(WithInitVar, {"value": 2, "scale": 3})


def _project_dataclasses() -> list[type]:
    import dataclasses
    import importlib
    import pkgutil

    import tickwarden

    found = {}
    for module in pkgutil.walk_packages(tickwarden.__path__, "tickwarden."):
        if module.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == module.name:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


def test_every_dataclass_of_the_project_built_without_its_init_is_the_one_its_init_builds():
    import dataclasses

    from tickwarden.models import _stored_names

    checked = 0
    for cls in _project_dataclasses():
        names = _stored_names(cls)
        if names is None:
            continue
        row = {name: object() for name in names}
        built = cls(**row)
        assert vars(from_row(cls, row)) == vars(built), cls
        assert [f.name for f in dataclasses.fields(cls)] == list(vars(built)), cls
        checked += 1
    assert checked >= 30


@dataclass(frozen=True)
class OwnInit:
    value: int

    def __init__(self, value: int) -> None:
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "seen", True)


@dataclass(frozen=True)
class Doubling:
    value: object

    def __init__(self, value: object) -> None:
        object.__setattr__(self, "value", (value, value))


@pytest.mark.parametrize("cls", [OwnInit, Doubling])
def test_a_class_with_an_init_of_its_own_that_does_more_is_built_by_it(cls):
    made = from_row(cls, {"value": 3})
    assert vars(made) == vars(cls(3))
