"""Rows become dataclasses: every field from its column, extra columns ignored, missing ones left to their defaults."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

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
