"""A kept statement psycopg has prepared, sent again in pipeline mode without `execute` (`store.base._run`)."""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest

from tests.dbutil import TEST_URL
from tickwarden.db import DedicatedDatabase

SQUARE = "SELECT %(n)s::int * %(n)s::int AS sq"
INVERSE = "SELECT 10 / %(d)s::int AS x"
SET = "SELECT set_config('tickwarden.probe', %(v)s, true) AS v"  # local to the transaction it runs in
GET = "SELECT current_setting('tickwarden.probe', true) AS v"
ECHO = "SELECT %(v)s::text AS v"
WARM = 8  # psycopg prepares a statement at its sixth run on a connection (prepare_threshold 5)


@pytest.fixture
def dedicated(db):
    database = DedicatedDatabase(TEST_URL, schema=db.schema)
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def executes(monkeypatch):
    """Statement text -> how many times psycopg's `Cursor.execute` ran it."""
    counted: Counter[str] = Counter()
    real = psycopg.Cursor.execute

    def execute(cur, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        counted[str(query)] += 1
        return real(cur, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return counted


def test_a_prepared_kept_statement_is_sent_without_execute_and_answers_the_same(dedicated, executes):
    for n in range(1, WARM + 1):
        with dedicated.transaction() as store:
            assert store.outbox._submit_text(SQUARE, {"n": n})() == [{"sq": n * n}]
            assert store.outbox._fetch(INVERSE, {"d": n}) == [{"x": 10 // n}]
    warm = executes[SQUARE] + executes[INVERSE]
    for n in range(20, 30):
        with dedicated.transaction() as store:
            first, second = store.outbox._submit_text(SQUARE, {"n": n}), store.outbox._submit_text(INVERSE, {"d": n})
            assert second() == [{"x": 10 // n}] and first() == [{"sq": n * n}]
    assert warm <= 12 and executes[SQUARE] + executes[INVERSE] == warm  # none of the later ones went through `execute`


def test_statements_sent_ahead_run_after_the_begin_queued_before_them_and_in_the_order_sent(dedicated, executes):
    for v in range(WARM + 5):
        with dedicated.transaction() as store:
            # SET is local to a transaction: sent before the BEGIN queued for it, it would be lost at once.
            store.outbox._send_text(SET, {"v": f"a{v}"})
            store.outbox._send_text(SET, {"v": f"b{v}"})
            assert store.outbox._fetch(GET, {}) == [{"v": f"b{v}"}]
    assert executes[SET] < WARM  # the later passes sent it ahead


def test_an_error_sent_ahead_is_raised_at_the_read_and_the_next_transaction_runs(dedicated, executes):
    for d in range(1, WARM + 1):
        with dedicated.transaction() as store:
            assert store.outbox._submit_text(INVERSE, {"d": d})() == [{"x": 10 // d}]
    with pytest.raises(psycopg.errors.DivisionByZero):
        with dedicated.transaction() as store:
            store.outbox._submit_text(INVERSE, {"d": 0})()
    before = executes[INVERSE]
    for d in (5, 2, 1):
        with dedicated.transaction() as store:
            assert store.outbox._submit_text(INVERSE, {"d": d})() == [{"x": 10 // d}]
    assert executes[INVERSE] - before <= 1  # at most the cursor made anew for the failed one


def test_parameters_that_dump_to_other_types_than_the_prepared_ones_go_through_execute(dedicated):
    values = [f"v{i}" for i in range(WARM)] + [None, "w", None, "x"]
    for v in values:
        with dedicated.transaction() as store:
            assert store.outbox._fetch(ECHO, {"v": v}) == [{"v": v}]


def test_outside_pipeline_mode_it_is_execute(db, executes):
    with db.transaction() as store:
        for n in range(WARM + 2):
            assert store.outbox._fetch(SQUARE, {"n": n}) == [{"sq": n * n}]
    assert executes[SQUARE] == WARM + 2



def test_sends_prepared_only_under_a_tested_psycopg():
    """Another psycopg release (pyproject admits none, but an environment may hold one) takes `execute`."""
    from tickwarden.pipeline import PSYCOPG_TESTED
    from tickwarden.store.base import _psycopg_internals

    assert psycopg.__version__.startswith(PSYCOPG_TESTED)
    assert _psycopg_internals(psycopg.__version__)
    assert not _psycopg_internals("3.4.0")
    assert not _psycopg_internals("3.2.9")
    assert not _psycopg_internals("4.0.0")
