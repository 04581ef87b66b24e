"""The benchmarks' figures contract: value, floor, ratio, target and whether it is met."""

import json

from benchmarks.__main__ import _target
from benchmarks.common import Figure, Target, table

KEYS = {"name", "value", "unit", "floor", "ratio", "target", "met"}


def test_it_compares_a_relative_target_with_the_ratio_to_the_floor():
    within = Target("<=", 1.5, of_floor=True)
    assert Figure("pass", 3_000, "ms", 2_400, within).as_json()["met"] is True
    assert Figure("pass", 9_300, "ms", 2_400, within).as_json()["met"] is False


def test_it_judges_the_target_on_the_figures_as_published():
    # 1.500003× the floor is published as a ratio of 1.5: a reader of the document checking
    # `ratio <= 1.5` must find the same verdict as the document's own `met`
    published = Figure("pass", 1_500.003, "ms", 1_000, Target("<=", 1.5, of_floor=True)).as_json()
    assert published["ratio"] == 1.5 and published["met"] is True
    assert Figure("pass", 1_500.06, "ms", 1_000, Target("<=", 1.5, of_floor=True)).as_json()["met"] is False


def test_it_compares_an_absolute_target_with_the_value():
    assert Figure("throughput", 1_200, "attempts/s", 800, Target(">=", 1000)).as_json()["met"] is True
    assert Figure("throughput", 438, "attempts/s", 800, Target(">=", 1000)).as_json()["met"] is False
    assert Figure("overhead", 5.0, "ms", None, Target("<", 5)).as_json()["met"] is False


def test_it_says_nothing_is_met_where_there_is_no_target_or_no_floor():
    assert Figure("mixed", 820, "ms").as_json() == {
        "name": "mixed", "value": 820, "unit": "ms", "floor": None, "ratio": None, "target": None, "met": None}
    # a relative target cannot be judged without the floor it is relative to
    assert Figure("pass", 3_000, "ms", None, Target("<=", 1.5, of_floor=True)).as_json()["met"] is None


def test_its_json_has_exactly_the_contracts_keys_and_survives_a_round_trip():
    figure = Figure("pass", 3_000, "ms", 2_400, Target("<=", 1.5, of_floor=True))
    row = json.loads(json.dumps(figure.as_json()))
    assert set(row) == KEYS
    assert row["ratio"] == 1.25 and row["target"] == "<= 1.5x floor"


def test_the_runner_reads_back_each_target_as_it_was_written():
    for target, unit in ((Target("<=", 1.5, of_floor=True), "ms"), (Target(">=", 50_000), "outcomes/s"),
                         (Target("<", 1), "s"), (Target("<", 250), "MB")):
        assert _target(target.describe(unit)) == target
    assert _target(None) is None


def test_the_table_marks_unmet_targets_and_aligns_every_figure():
    text = table([Figure("pass", 9_300, "ms", 2_400, Target("<=", 1.5, of_floor=True)),
                  Figure("idle pass", 0.4, "ms", None, Target("<", 1))], "ticker")
    lines = text.strip().splitlines()
    assert lines[0] == "== ticker"
    assert "3.88x" in lines[2] and lines[2].endswith("NO")
    assert lines[3].endswith("yes")
    assert len({len(line) for line in lines[1:]}) == 1   # every column is padded to its widest cell
