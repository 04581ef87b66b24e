"""Scenario `maintenance:` entries are checked before anything runs: one sentence naming the entry."""

import pytest

from tickwarden.errors import InvalidInput
from tickwarden.simulate import parse_scenario

BASE = {
    "start": "2026-12-01T00:00:00Z",
    "end": "2026-12-01T06:00:00Z",
    "tenants": ["acme"],
    "workflows": [{"tenant": "acme", "name": "nightly-pipeline", "cron": "0 2 * * *"}],
}


def parse(*windows):
    return parse_scenario({**BASE, "maintenance": list(windows)}, source="s.yaml")


def test_workflow_and_tenant_windows_are_parsed():
    scenario = parse({"workflow": "acme/nightly-pipeline", "start": "2026-12-01T01:00:00Z",
                      "end": "2026-12-01T03:00:00Z"},
                     {"tenant": "acme", "cron": "0 4 * * *", "duration": "30m", "timezone": "Europe/Berlin"})
    first, second = scenario.maintenance
    assert (first.tenant, first.workflow, first.spec.starts_at.isoformat()) == (
        "acme", "acme/nightly-pipeline", "2026-12-01T01:00:00+00:00")
    assert (second.tenant, second.workflow, second.spec.duration_seconds) == ("acme", None, 1800)


@pytest.mark.parametrize(("window", "says"), [
    ({"workflow": "acme/other", "start": "2026-12-01T01:00:00Z", "end": "2026-12-01T03:00:00Z"},
     "s.yaml: maintenance[0].workflow: unknown workflow 'acme/other'."),
    ({"tenant": "globex", "start": "2026-12-01T01:00:00Z", "end": "2026-12-01T03:00:00Z"},
     "s.yaml: maintenance[0].tenant: unknown tenant 'globex'."),
    ({"start": "2026-12-01T01:00:00Z", "end": "2026-12-01T03:00:00Z"},
     "s.yaml: maintenance[0]: name either a 'workflow' or a whole 'tenant'."),
    ({"tenant": "acme", "workflow": "acme/nightly-pipeline", "start": "2026-12-01T01:00:00Z",
      "end": "2026-12-01T03:00:00Z"}, "s.yaml: maintenance[0]: name either"),
    ({"tenant": "acme", "start": "2026-12-01T03:00:00Z", "end": "2026-12-01T01:00:00Z"},
     "s.yaml: maintenance[0]: the window's end must be after its start."),
    ({"tenant": "acme", "start": "2026-12-01T01:00:00", "end": "2026-12-01T03:00:00Z"},
     "s.yaml: maintenance[0].start: the time must carry a timezone"),
    ({"tenant": "acme", "cron": "0 99 * * *", "duration": "1h"}, "s.yaml: maintenance[0]: the window's cron"),
    ({"tenant": "acme", "start": "2026-12-01T01:00:00Z", "end": "2026-12-01T03:00:00Z", "why": "x"},
     "s.yaml: unknown key 'maintenance[0].why'."),
])
def test_a_bad_entry_is_rejected_with_one_sentence(window, says):
    with pytest.raises(InvalidInput) as caught:
        parse(window)
    assert caught.value.message.startswith(says), caught.value.message
    assert "\n" not in caught.value.message
