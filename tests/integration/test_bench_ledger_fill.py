"""The ledger benchmark's history goes through the product's writes and notes each workflow's success once."""

import pytest

from benchmarks import common, ledger
from tickwarden.store import Store
from tests.dbutil import TEST_URL


@pytest.fixture(autouse=True)
def _bench_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "BENCH_URL", TEST_URL)


def test_the_history_leaves_each_workflows_newest_success_noted_by_one_write():
    # A schema of its own, new: the test pool's are emptied with DELETE and keep their pages.
    with common.bench_schema() as schema, common.connect(schema) as conn:
        workflow = ledger.fill_history(schema, 4000)
        store = Store(conn)
        noted = conn.execute(
            "SELECT workflow_id, run_id, scheduled_for FROM workflow_successes ORDER BY workflow_id").fetchall()
        newest = conn.execute(
            """SELECT DISTINCT ON (workflow_id) workflow_id, id, scheduled_for FROM runs WHERE status = 'succeeded'
                ORDER BY workflow_id, scheduled_for DESC, id DESC""").fetchall()
        pages = conn.execute("SELECT pg_relation_size('workflow_successes') / current_setting('block_size')::int"
                             ).fetchone()[0]
        streak = store.monitoring.evaluation_inputs([workflow])[0].failures
    # the trigger's row for each of the 100 workflows is the newest success among its runs
    assert noted == newest and len(noted) == 100
    assert streak == 5
    # Newest first, each row was written once and never moved on: one page holds the 100.
    # Oldest first, the target workflow's 1,333 successes each left a version of its row
    # behind, each walked by the next success's note: 25 pages.
    assert pages == 1
