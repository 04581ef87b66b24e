"""The pipeline benchmark's ledger: the month partitions a deployment keeps, every one of them holding history."""

from datetime import UTC, datetime

import pytest

from benchmarks import common, pipeline
from tests.dbutil import TEST_URL


@pytest.fixture(autouse=True)
def _bench_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "BENCH_URL", TEST_URL)


def test_every_workflows_history_is_spread_over_the_months_retention_keeps(db, schema):
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    ticks = pipeline.spread_ticks(db, now, 16, 30 + 4)
    pipeline.load_ledger(schema, 3, 30, ticks)
    outcomes = pipeline.load_outcomes(schema, 3, 30, 4, ticks)

    with db.transaction() as store:
        months = [m.suffix for m in store.retention.ledger_months()]
        per_month = dict(store.conn.execute(
            "SELECT substr(tableoid::regclass::text, 6), count(DISTINCT workflow_id) FROM runs GROUP BY 1").fetchall())
        newest = store.conn.execute("SELECT max(finished_at) FROM attempts").fetchone()[0]
    assert months == [f"p{y}{m:02d}" for y, m in [(2025, 11), (2025, 12)] + [(2026, m) for m in range(1, 13)]
                      + [(2027, 1), (2027, 2)]]
    # Each past month holds runs of every workflow, the months ahead and DEFAULT none.
    assert per_month == {suffix: 3 for suffix in months[:-2]}
    assert outcomes == 12 and newest < now


def test_without_months_the_ledger_follows_each_cadence_from_the_epoch(db, schema):
    ticks = pipeline.spread_ticks(db, datetime(2026, 12, 3, 12, tzinfo=UTC), 0, 24)
    pipeline.load_ledger(schema, 3, 20, ticks)

    with db.transaction() as store:
        assert store.retention.ledger_months() == []
        spans = store.conn.execute(
            "SELECT workflow_id, min(scheduled_for), max(scheduled_for) FROM runs GROUP BY 1 ORDER BY 1").fetchall()
    assert [(last - first).total_seconds() for _, first, last in spans] == [19 * 3600, 19 * 86400, 19 * 300]
