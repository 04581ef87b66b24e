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


def summarize(params: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Summarise the readings of `extract` and the rows of an upstream SQL step."""
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


def idempotent_import(params: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Import `rows` readings into the tenant's database once per tick, however often the tick is retried.

    The run key (`TICKWARDEN_RUN_KEY`, the same for every attempt of one tick) is claimed
    in the same transaction as the import: a retry or a redelivery finds it claimed and
    writes nothing, and a crash before the commit leaves neither. The database URL is the
    tenant's secret, declared on the step as `secrets: [secret:<params.database>]`.
    """
    import os

    import psycopg

    run_key = os.environ["TICKWARDEN_RUN_KEY"]
    with psycopg.connect(os.environ[params.get("database", "WAREHOUSE_URL")]) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS tickwarden_imports (run_key text PRIMARY KEY)")
        conn.execute("CREATE TABLE IF NOT EXISTS readings (run_key text NOT NULL, value integer NOT NULL)")
        claimed = conn.execute("INSERT INTO tickwarden_imports (run_key) VALUES (%s) ON CONFLICT DO NOTHING",
                               (run_key,)).rowcount
        if not claimed:
            return {"imported": 0, "skipped": "already imported for this tick"}
        values = [(run_key, (i * 7) % 97) for i in range(int(params.get("rows", 10)))]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO readings (run_key, value) VALUES (%s, %s)", values)
        if params.get("fail_after_import"):  # the commit is undone with the claim: nothing half-written
            raise RuntimeError("failed after importing")
    return {"imported": len(values)}
