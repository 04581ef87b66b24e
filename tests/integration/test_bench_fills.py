"""The benchmarks' ledgers go through the product's writes and note each workflow's newest success once.

Each fill gets schemas of its own, new: the test pool's are emptied with DELETE and keep their pages.
"""

import pytest

from benchmarks import common, ledger, retention
from tickwarden.store import Store
from tests.dbutil import TEST_URL


@pytest.fixture(autouse=True)
def _bench_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "BENCH_URL", TEST_URL)


def _noted(schema: str) -> tuple[list[tuple], list[tuple], int]:
    """The noted successes, the newest success among each workflow's runs, and the noted ones' pages."""
    with common.connect(schema) as conn:
        noted = conn.execute("SELECT workflow_id, run_id FROM workflow_successes ORDER BY workflow_id").fetchall()
        newest = conn.execute("""SELECT DISTINCT ON (workflow_id) workflow_id, id FROM runs WHERE status = 'succeeded'
                                  ORDER BY workflow_id, scheduled_for DESC, id DESC""").fetchall()
        pages = conn.execute("SELECT pg_relation_size('workflow_successes') / current_setting('block_size')::int"
                             ).fetchone()[0]
    return noted, newest, pages


def test_the_ledger_history_leaves_each_workflows_newest_success_noted_by_one_write():
    with common.bench_schema() as schema:
        workflow = ledger.fill_history(schema, 4000)
        noted, newest, pages = _noted(schema)
        with common.connect(schema) as conn:
            streak = Store(conn).monitoring.evaluation_inputs([workflow])[0].failures
    # the trigger's row for each of the 100 workflows is the newest success among its runs
    assert noted == newest and len(noted) == 100
    assert streak == 5
    # Newest first, each row was written once and never moved on: one page holds the 100.
    # Oldest first, the target workflow's 1,333 successes each left a version of its row
    # behind, each walked by the next success's note: 25 pages.
    assert pages == 1


def test_the_retention_fill_and_its_copy_note_each_success_once():
    with common.bench_schema() as schema, common.bench_schema("floor") as floor:
        retention.fill(schema, 20, 100)
        retention.copy(schema, floor)
        filled, copied = _noted(schema), _noted(floor)
    for noted, newest, pages in (filled, copied):
        assert noted == newest and len(noted) == 20
        # Newest first, each workflow's row was written once; oldest first, each of its 90
        # successes left a version of it behind, walked by the next one's note (15 pages).
        assert pages == 1
    assert copied[0] == filled[0]
