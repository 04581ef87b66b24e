"""The retention benchmark's ledger, and its copy for the floor, note each workflow's newest success once."""

import pytest

from benchmarks import common, retention
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


def test_the_fill_and_its_copy_note_each_success_once():
    # Schemas of their own, new: the test pool's are emptied with DELETE and keep their pages.
    with common.bench_schema() as schema, common.bench_schema("floor") as floor:
        retention.fill(schema, 20, 100)
        retention.copy(schema, floor)
        filled, copied = _noted(schema), _noted(floor)
    for noted, newest, pages in (filled, copied):
        assert noted == newest and len(noted) == 20
        # Newest first, each workflow's row was written once; oldest first, each of its 90
        # successes left a version of it behind, walked by the next one's note.
        assert pages == 1
    assert copied[0] == filled[0]
