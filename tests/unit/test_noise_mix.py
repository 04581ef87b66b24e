"""The noise benchmark's fault mix: intermittent incidents that no streak can catch."""

from __future__ import annotations

from datetime import timedelta

from benchmarks.noise import INTERMITTENT_RUN, build, category_of
from tickwarden.cadence import parse_schedule
from tickwarden.clock import parse_utc


def test_the_mix_holds_intermittent_incidents_failing_most_ticks_but_never_a_streak():
    scenario, incidents, classes = build(400, 10, 7)
    flaky = [i for i in incidents if i.kind == "intermittent"]
    assert flaky and all(i.genuine for i in flaky)
    crons = {f"{w['tenant']}/{w['name']}": w["cron"] for w in scenario["workflows"]}
    for incident in flaky:
        assert classes[incident.workflow] in INTERMITTENT_RUN
        failing = sorted(parse_utc(f["start"]) for f in scenario["faults"]
                         if f["workflow"] == incident.workflow and incident.start <= parse_utc(f["start"]) < incident.end
                         and f["error"].startswith("upstream API"))
        ticks = list(parse_schedule(crons[incident.workflow]).fires_between(
            incident.start - timedelta(seconds=1), incident.end))
        assert incident.end - incident.start >= timedelta(hours=2)
        assert len(failing) >= 0.4 * len(ticks), "a large share of the ticks fail"
        in_a_row = longest = 0
        for tick in ticks:
            in_a_row = in_a_row + 1 if tick in failing else 0
            longest = max(longest, in_a_row)
        assert longest <= INTERMITTENT_RUN[classes[incident.workflow]], "never enough in a row for the streak"


def test_each_genuine_kind_has_the_error_category_its_failures_carry():
    by_kind = {}
    _, incidents, _ = build(400, 10, 7)
    for incident in incidents:
        if incident.genuine:
            by_kind[incident.kind] = category_of(incident)
    assert by_kind == {"outage": "connection", "defect": "step_error", "trigger outage": "missed",
                       "intermittent": "connection"}
