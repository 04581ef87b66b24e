"""The collector's thresholds while simulations run (`engine.fewer_collections`)."""

from __future__ import annotations

import gc

import pytest

from tickwarden.simulate import engine


@pytest.fixture
def default_thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_it_raises_the_young_threshold_while_a_simulation_runs(default_thresholds):
    with engine.fewer_collections():
        assert gc.get_threshold() == (engine.YOUNG_COLLECTION_EVERY, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_it_restores_the_thresholds_when_the_last_of_overlapping_simulations_ends(default_thresholds):
    first, second = engine.fewer_collections(), engine.fewer_collections()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold() == (engine.YOUNG_COLLECTION_EVERY, 10, 10)
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_it_keeps_a_higher_threshold_the_process_chose(default_thresholds):
    gc.set_threshold(50_000, 20, 30)
    with engine.fewer_collections():
        assert gc.get_threshold() == (50_000, 20, 30)
    assert gc.get_threshold() == (50_000, 20, 30)


def test_it_restores_the_thresholds_after_a_failed_simulation(default_thresholds):
    with pytest.raises(RuntimeError), engine.fewer_collections():
        raise RuntimeError("the simulation failed")
    assert gc.get_threshold() == (700, 10, 10)
