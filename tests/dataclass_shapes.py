"""Dataclasses whose `__init__` does more than store their fields: what the row builders
(`store.base.record_builder`, `models.from_row`) must build through that `__init__`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Checked:
    """A `__post_init__` that validates."""

    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


@dataclass(frozen=True)
class Derived:
    """A field left out of `__init__`."""

    value: int
    twice: int = field(init=False, default=0)


@dataclass(frozen=True, slots=True)
class Slotted:
    """Slots: no `__dict__` to set."""

    value: int
