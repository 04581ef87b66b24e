"""Workflow files and scenarios declaring `kind: external`: no steps, check-ins instead (no database)."""

from datetime import UTC, datetime

import pytest

from tickwarden import checkins
from tickwarden.cadence import parse_schedule
from tickwarden.errors import InvalidInput, UsageError
from tickwarden.simulate.scenario import parse_scenario
from tickwarden.workflow_file import parse_text

NOW = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
HEAD = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: export
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 2 * * *"}
"""
STEPS = "    steps: [{name: load, kind: python, call: \"m:f\"}]\n"


def test_an_external_workflow_has_a_schedule_and_no_steps():
    plan = parse_text(HEAD + "    kind: external\n", "f.yaml", NOW)
    [planned] = plan.workflows
    assert (planned.spec.kind, planned.recipe) == ("external", {"steps": []})


def test_an_external_workflow_with_steps_is_refused_with_one_sentence():
    with pytest.raises(InvalidInput, match=r"workflows\[0\]\.steps: an external workflow has no steps"):
        parse_text(HEAD + "    kind: external\n" + STEPS, "f.yaml", NOW)


def test_a_managed_workflow_without_steps_is_refused():
    with pytest.raises(InvalidInput, match=r"workflows\[0\]\.steps: a workflow needs at least one step"):
        parse_text(HEAD, "f.yaml", NOW)
    assert parse_text(HEAD + STEPS, "f.yaml", NOW).workflows[0].spec.kind == "managed"


def test_an_external_workflow_cannot_expect_rows_and_an_unknown_kind_is_refused():
    with pytest.raises(InvalidInput, match="expect_rows"):
        parse_text(HEAD + "    kind: external\n    expect_rows: true\n", "f.yaml", NOW)
    with pytest.raises(InvalidInput, match="kind"):
        parse_text(HEAD + "    kind: airflow\n", "f.yaml", NOW)


def scenario(**changes):
    raw = {
        "start": "2026-11-30T01:55:00Z", "end": "2026-11-30T03:00:00Z", "tenants": ["acme"],
        "workflows": [{"tenant": "acme", "name": "export", "cron": "0 2 * * *", "kind": "external"},
                      {"tenant": "acme", "name": "nightly", "cron": "0 2 * * *"}],
        "checkins": [{"workflow": "acme/export", "at": "2026-11-30T02:04:00Z", "status": "success"}],
    }
    raw.update(changes)
    return raw


def test_scenario_checkins_default_to_the_newest_tick_and_are_sorted():
    parsed = parse_scenario(scenario(checkins=[
        {"workflow": "acme/export", "at": "2026-11-30T02:04:00Z", "status": "success", "tick": "2026-11-30T02:00:00Z"},
        {"workflow": "acme/export", "at": "2026-11-30T02:00:10Z", "status": "start"},
    ]))
    assert [(c.status, c.tick) for c in parsed.checkins] == [
        ("start", None), ("success", datetime(2026, 11, 30, 2, tzinfo=UTC))]


@pytest.mark.parametrize("checkin, message", [
    ({"workflow": "acme/nightly", "at": "2026-11-30T02:04:00Z", "status": "success"}, "not of kind external"),
    ({"workflow": "acme/nope", "at": "2026-11-30T02:04:00Z", "status": "success"}, "unknown workflow"),
    ({"workflow": "acme/export", "at": "2026-11-30T05:00:00Z", "status": "success"}, "outside"),
    ({"workflow": "acme/export", "at": "2026-11-30T02:04:00Z", "status": "done"}, "status"),
    ({"workflow": "acme/export", "at": "2026-11-30T02:04:00Z", "status": "fail", "tick": "2026-11-30T03:00:00Z"},
     "after the report"),
])
def test_bad_scenario_checkins_are_refused_before_anything_runs(checkin, message):
    with pytest.raises(InvalidInput, match=message):
        parse_scenario(scenario(checkins=[checkin]))


def test_a_report_is_checked_before_it_reaches_the_database():
    with pytest.raises(UsageError, match="start, success or fail"):
        checkins.parse_report("finished")
    with pytest.raises(UsageError, match="ISO 8601"):
        checkins.parse_report("start", tick="02:00")
    with pytest.raises(UsageError, match="exit code"):
        checkins.parse_report("fail", exit_code=-3)
    with pytest.raises(UsageError, match="KiB"):
        checkins.parse_report("fail", log="x" * (checkins.MAX_LOG_BYTES + 1))
    report = checkins.parse_report("fail", tick="2026-11-30T03:00:00+01:00", exit_code=1, log="boom")
    assert report.tick == datetime(2026, 11, 30, 2, tzinfo=UTC)


def test_the_newest_tick_is_the_last_fire_time_at_or_before_now():
    daily = parse_schedule("0 2 * * *", "Europe/Berlin")
    assert checkins.newest_tick(daily, datetime(2026, 11, 30, 1, 0, tzinfo=UTC)) == datetime(2026, 11, 30, 1, tzinfo=UTC)
    assert checkins.newest_tick(daily, datetime(2026, 11, 30, 0, 59, tzinfo=UTC)) == datetime(2026, 11, 29, 1,
                                                                                              tzinfo=UTC)
    yearly = parse_schedule("0 0 1 1 *", "UTC")
    assert checkins.newest_tick(yearly, datetime(2026, 11, 30, tzinfo=UTC)) == datetime(2026, 1, 1, tzinfo=UTC)


def test_keys_are_unguessable_and_only_their_hash_is_kept():
    keys = {checkins.new_key() for _ in range(100)}
    assert len(keys) == 100 and all(checkins.KEY_SHAPE.match(k) and len(k) >= 43 for k in keys)
    key = keys.pop()
    assert checkins.hash_key(key) != key and len(checkins.hash_key(key)) == 64
