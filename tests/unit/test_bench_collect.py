"""A benchmark whose child process dies ends with one sentence instead of waiting forever."""

import multiprocessing as mp

import pytest

from benchmarks.pipeline import collect


def _report(out, value):
    out.put(value)


def _die(out, value):
    raise SystemExit(3)


def test_it_gathers_one_result_from_each_child():
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_report, args=(out, n)) for n in range(2)]
    for p in procs:
        p.start()
    assert sorted(collect(out, procs, "drain")) == [0, 1]
    assert all(p.exitcode == 0 for p in procs)


def test_a_child_that_dies_before_reporting_stops_the_rest_and_says_so():
    ctx = mp.get_context("spawn")
    out, never = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_die, args=(out, 0)), ctx.Process(target=never.wait)]
    for p in procs:
        p.start()
    with pytest.raises(SystemExit, match="a drain process exited with code 3 before reporting"):
        collect(out, procs, "drain")
    assert not any(p.is_alive() for p in procs)
