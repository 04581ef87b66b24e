"""Small, real step functions used by `examples/quickstart.yaml`.

A python step is called as `fn(params, inputs)`, where `inputs` maps each upstream
step's name to its output, and returns something JSON can hold.
"""

from __future__ import annotations

from typing import Any


def extract(params: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Produce `count` readings of a synthetic sensor: (i * step) mod 97."""
    count = int(params.get("count", 10))
    step = int(params.get("step", 7))
    readings = [(i * step) % 97 for i in range(count)]
    return {"readings": readings}


def check(params: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Count the readings of `extract` inside and outside [low, high]; fail when there are none."""
    readings = list((inputs.get(params.get("readings_from", "extract")) or {}).get("readings", []))
    if not readings:
        raise ValueError("no readings to check")
    low, high = float(params.get("low", 0)), float(params.get("high", 100))
    inside = sum(1 for value in readings if low <= value <= high)
    return {"rows": len(readings), "in_range": inside, "out_of_range": len(readings) - inside}


def summarize(params: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Summarise the readings of `extract` and the result of `check`."""
    readings = list((inputs.get(params.get("readings_from", "extract")) or {}).get("readings", []))
    total = sum(readings)
    summary: dict[str, Any] = {
        "count": len(readings),
        "total": total,
        "mean": round(total / len(readings), 3) if readings else None,
        "max": max(readings) if readings else None,
    }
    checked = inputs.get(params.get("check_from", "check"))
    if checked is not None:
        summary["database_check"] = checked
    return summary
