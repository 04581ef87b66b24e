from pathlib import Path

import pytest

from tickwarden.errors import InvalidInput
from tickwarden.simulate.scenario import load_scenario, parse_scenario

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "tickwarden" / "scenarios"


def base(**changes):
    raw = {
        "name": "n",
        "start": "2026-11-30T01:55:00Z",
        "end": "2026-11-30T09:30:00Z",
        "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": "nightly", "cron": "0 2 * * *", "duration": 200}],
    }
    raw.update(changes)
    return raw


def test_the_shipped_seed_scenarios_load():
    for path in SHIPPED.glob("*.yaml"):
        scenario = load_scenario(path)
        assert scenario.workflows and scenario.start < scenario.end


def test_defaults_fill_in_timezone_and_fault_mode():
    scenario = parse_scenario(base(faults=[{"workflow": "acme/nightly", "start": "2026-11-30T02:03:00Z",
                                             "end": "2026-11-30T02:04:00Z"}]))
    assert scenario.workflows[0].timezone == "UTC"
    assert scenario.faults[0].mode == "error" and scenario.faults[0].retryable


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"colour": "blue"}, "unknown key 'colour'"),
        ({"workflows": [{"tenant": "acme", "name": "x", "cron": "0 2 * * *", "speed": 1}]}, "unknown key 'workflows[0].speed'"),
        ({"faults": [{"workflow": "acme/ghost", "start": "2026-11-30T02:00:00Z", "end": "2026-11-30T02:01:00Z"}]},
         "faults[0].workflow: unknown workflow 'acme/ghost'"),
        ({"end": "2026-11-30T01:00:00Z"}, "'end' must be after 'start'"),
        ({"faults": [{"workflow": "acme/nightly", "start": "2026-11-30T03:00:00Z", "end": "2026-11-30T02:00:00Z"}]},
         "faults[0]: 'end' must be after 'start'"),
        ({"workflows": [{"tenant": "acme", "name": "x", "cron": "0 2 30 2 *"}]}, "workflows[0]: Cron expression"),
        ({"workflows": [{"tenant": "acme", "name": "x", "cron": "0 2 * * *", "timezone": "Moon/Base"}]}, "Unknown timezone"),
        ({"workflows": [{"tenant": "other", "name": "x", "cron": "0 2 * * *"}]}, "unknown tenant 'other'"),
        ({"manual_runs": [{"workflow": "acme/nightly", "at": "2027-01-01T00:00:00Z"}]}, "outside the scenario"),
        ({"workflows": [{"tenant": "acme", "name": "x", "cron": "0 2 * * *", "policy": {"retries": -2}}]}, "retries"),
        ({"start": "2026-11-30T01:55:00"}, "timezone"),
        ({"faults": [{"workflow": "acme/nightly", "start": "2026-11-30T02:00:00Z", "end": "2026-11-30T02:01:00Z",
                      "mode": "explode"}]}, "faults[0].mode"),
    ],
)
def test_bad_scenarios_get_one_sentence_naming_the_key(changes, fragment):
    with pytest.raises(InvalidInput) as info:
        parse_scenario(base(**changes))
    assert fragment in info.value.message
    assert "\n" not in info.value.message


def test_yaml_syntax_errors_name_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("start: [\n")
    with pytest.raises(InvalidInput) as info:
        load_scenario(path)
    assert "not valid YAML" in info.value.message
