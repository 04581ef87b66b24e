"""The self-test's own bookkeeping on a real database: it cleans up after an interruption."""

from __future__ import annotations

import pytest

from tickwarden.selftest import Selftest, SelftestError


def _platform_channel(db, clock):
    with db.transaction() as store:
        store.outbox.upsert_notification_channel(tenant_id=None, name="oncall", kind="recording", audience="engineering",
                                          now=clock.now(), config={})


def _leftovers(db) -> dict[str, int]:
    with db.connection() as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: S608 - fixed names
                for table in ("tenants", "selftests", "workflows", "runs", "attempts")}


def test_ctrl_c_while_waiting_removes_the_synthetic_tenant(db, clock):
    _platform_channel(db, clock)

    def interrupted(_: float) -> None:
        assert _leftovers(db)["runs"] == 3  # the stage was set before the interruption
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Selftest(db, clock, timeout=60, sleep=interrupted).run()
    assert _leftovers(db) == {"tenants": 0, "selftests": 0, "workflows": 0, "runs": 0, "attempts": 0}


def test_leftovers_of_a_killed_selftest_are_removed_by_the_next_once_stale(db, clock):
    _platform_channel(db, clock)
    killed = Selftest(db, clock, timeout=60)
    killed._prepare()  # the process died here: nothing removed its tenant
    clock.advance(2 * 3600)

    def stop(_: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Selftest(db, clock, timeout=60, sleep=stop).run()
    assert _leftovers(db)["tenants"] == 0


def test_a_named_tenant_that_does_not_exist_is_one_clear_sentence_and_leaves_nothing(db, clock):
    _platform_channel(db, clock)
    with pytest.raises(Exception, match="No tenant named 'nosuch'"):
        Selftest(db, clock, tenant="nosuch").run()
    assert _leftovers(db)["tenants"] == 0


def test_with_no_channel_to_test_nothing_is_created(db, clock):
    with pytest.raises(SelftestError, match="no notification channel to test"):
        Selftest(db, clock).run()
    assert _leftovers(db)["tenants"] == 0
