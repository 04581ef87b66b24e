"""`runner.dumps_str`: the text `json.dumps(value, default=str)` gives, from an encoder made once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from tickwarden.environments import runner
from tickwarden.environments.runner import dumps_str

VALUES = [None, 0, 1.5, "text", "naïve ✓ \"quoted\"\n", [1, "two", None], {"b": 1, "a": [True, False]},
          {"when": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC), "amount": Decimal("1.10"), "set": {1}},
          {"nested": {"deeper": [{"x": float("nan")}, {"y": float("inf")}]}}, {1: "int key"}]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_str_is_json_dumps_with_default_str(value) -> None:  # type: ignore[no-untyped-def]
    assert dumps_str(value) == json.dumps(value, default=str)


def test_dumps_str_makes_no_encoder_per_call(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    made: list[int] = []
    real_init = json.JSONEncoder.__init__

    def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(json.JSONEncoder, "__init__", init)
    dumps_str({"a": datetime(2026, 1, 1, tzinfo=UTC)})
    runner.envelope(b"k" * 32, "request", "c" * 32, {"op": "run", "at": datetime(2026, 1, 1, tzinfo=UTC)})
    assert made == []


def test_a_circular_value_is_refused_as_json_dumps_refuses_it() -> None:
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_str(looped)
    assert dumps_str([1]) == "[1]", "the encoder is usable after a refusal"
