"""`_records` builds its rows' dataclasses without their `__init__` (`record_builder`): the same instances, as frozen."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from tests.dataclass_shapes import Checked, Derived, Slotted
from tickwarden.store.base import record_builder
from tickwarden.store.monitoring import ClaimedAttempt, EvaluationInput

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_claimed_row_builds_the_instance_its_init_builds_field_for_field():
    row = (7, 11, AT, 3, AT, "pending_retry", "timeout", False, True, 99, AT)
    made, built = record_builder(ClaimedAttempt)([row])[0], ClaimedAttempt(*row)
    assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
    assert list(vars(made).items()) == list(vars(built).items())  # the same attributes, in field order
    assert type(made) is ClaimedAttempt
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.run_id = 12  # type: ignore[misc]


def test_an_evaluation_row_fills_every_field_defaults_included():
    row = (5, 1, True, "{}", False, 3600, 2, AT, 40, AT, "step_error", "boom", None, 39, AT, None, None,
           None, 10, 10, 4)
    made = record_builder(EvaluationInput)([row])[0]
    assert made == EvaluationInput(*row)
    assert (made.rate_window, made.rate_ticks, made.rate_failures) == (10, 10, 4)


def test_a_row_of_another_length_fails_as_the_init_would():
    build = record_builder(ClaimedAttempt)
    with pytest.raises(ValueError):
        build([(7, 11, AT)])
    with pytest.raises(ValueError):
        build([(7, 11, AT, 3, AT, "succeeded", None, False, False, None, None, "extra")])
    assert build([]) == []


def test_many_rows_build_as_many_instances_in_order():
    rows = [(i, i, AT, i, AT, "succeeded", None, False, False, None, None) for i in range(5)]
    made = record_builder(ClaimedAttempt)(rows)
    assert made == [ClaimedAttempt(*row) for row in rows]
    assert len({id(m) for m in made}) == 5


@pytest.mark.parametrize("cls", [Checked, Derived, Slotted])
def test_a_class_whose_init_does_more_than_store_its_fields_is_built_by_its_init(cls):
    [made] = record_builder(cls)([(1,)])
    assert made == cls(1) and made.__class__ is cls
    if cls is Derived:
        assert made.twice == 0
    with pytest.raises(ValueError):
        record_builder(Checked)([(-1,)])
