"""The outcome statement's text leaves out the CTEs its parameters give nothing to do.

A data-modifying CTE is set up and run at every execution, rows or none: a finish that
wakes nobody and carries no steps' rows is sent without its notification and its steps'
insert (`store.ledger.finish_text`).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tickwarden.models import Attempt, AttemptOutcome
from tickwarden.store.ledger import finish_text

TICK = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _finished(n: int) -> list[tuple[Attempt, AttemptOutcome, datetime]]:
    attempts = [Attempt(id=i, tenant_id=1, workflow_id=i, run_id=i, run_scheduled_for=TICK, number=1,
                        status="running", worker_id="w1", lease_expires_at=TICK, queued_at=TICK, started_at=TICK,
                        heartbeat_at=TICK, finished_at=None, retryable=None, error_category=None, error=None,
                        failed_step=None, log_tail=None, outputs={}) for i in range(1, n + 1)]
    return [(a, AttemptOutcome(status="succeeded"), TICK) for a in attempts]


@pytest.mark.parametrize("n", [1, 3])
def test_a_finish_that_wakes_nobody_and_writes_no_step_leaves_both_out(n: int) -> None:
    full = finish_text(_finished(n))
    assert "stepped AS" in full and "woken AS" in full and "pg_notify" in full and "%(steps)s" in full
    bare = finish_text(_finished(n), wake=False, steps=False)
    assert "stepped AS" not in bare and "attempt_steps" not in bare and "%(steps)s" not in bare
    assert "woken" not in bare and "pg_notify" not in bare and "%(wake)s" not in bare
    # everything else is the full statement's, word for word
    assert bare.replace("\n", " ").endswith(
        "SELECT done.id AS attempt_id, done.run_id, done.number, moved.status AS run_status"
        " FROM done LEFT JOIN moved ON moved.id = done.run_id ORDER BY done.id;")
    assert "stepped AS" in finish_text(_finished(n), wake=False) and "woken AS" not in finish_text(
        _finished(n), wake=False)
    assert "woken AS" in finish_text(_finished(n), steps=False) and "stepped AS" not in finish_text(
        _finished(n), steps=False)
