"""Workflow files: validation before anything is written, and idempotent apply."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.helpers import catalog_counts
from tickwarden import catalog
from tickwarden.errors import InvalidInput, NotFound

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"

GOOD = """
tenants:
  - {name: acme, display_name: Acme Corp}
  - {name: globex}
users:
  - {tenant: acme, email: ops@acme.test, name: Acme Ops}
  - {tenant: globex, email: data@globex.test}
environments:
  - {tenant: acme, name: default, python: null, idle_timeout_seconds: 300}
  - {tenant: globex, name: default}
channels:
  - {tenant: acme, name: acme-slack, kind: slack, audience: customer, config: {channel: "#alerts"}, secret_ref: "secret:SLACK_TOKEN"}
platform_channels:
  - {name: platform, kind: email, config: {host: smtp.platform.test, from: tickwarden@platform.test, to: ["oncall@platform.test"]}}
workflows:
  - tenant: acme
    name: nightly
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 2 * * *", timezone: Europe/Berlin}
    policy: {retries: 3}
    steps:
      - {name: extract, kind: python, call: "tickwarden.examples_steps:extract", params: {count: 3}}
      - {name: load, kind: sql, query: "SELECT 1", database: "secret:WAREHOUSE", depends_on: [extract]}
  - tenant: globex
    name: quality
    environment: default
    publisher: data@globex.test
    schedule: {cron: "*/5 * * * *", status: paused}
    monitoring: false
    steps:
      - {name: check, kind: sql, query: "SELECT 1", database: "secret:GLOBEX_DB"}
"""

BAD = {
    "unknown step": (("depends_on: [extract]", "depends_on: [lod]"),
                     "fleet.yaml: workflows[0].steps[1].depends_on: unknown step 'lod'."),
    "cycle": (("params: {count: 3}}", "params: {count: 3}, depends_on: [load]}"),
              "fleet.yaml: workflows[0].steps[0].depends_on: the steps form a cycle: extract -> load -> extract."),
    "bad cron": (('"0 2 * * *"', '"0 25 * * *"'), "fleet.yaml: workflows[0].schedule.cron: cron expression"),
    "bad zone": (("Europe/Berlin", "Mars/Olympus"), "fleet.yaml: workflows[0].schedule.timezone: unknown timezone"),
    "unknown environment": (("    environment: default\n    publisher: ops", "    environment: gpu\n    publisher: ops"),
                            "fleet.yaml: workflows[0].environment: unknown environment 'gpu' of tenant 'acme'."),
    "unknown publisher": (("publisher: ops@acme.test", "publisher: nobody@acme.test"),
                          "fleet.yaml: workflows[0].publisher: unknown user 'nobody@acme.test' of tenant 'acme'."),
    "duplicate workflow": (('database: "secret:GLOBEX_DB"}\n', 'database: "secret:GLOBEX_DB"}\n'
                            "  - tenant: globex\n    name: quality\n    environment: default\n"
                            "    publisher: data@globex.test\n    schedule: {cron: '@daily'}\n"
                            "    steps: [{name: a, kind: sql, query: 'SELECT 1', database: 'secret:X'}]\n"),
                           "fleet.yaml: workflows[2].name: duplicate workflow 'quality' (also workflows[1])."),
    "duplicate step": (("{name: load,", "{name: extract,"),
                       "fleet.yaml: workflows[0].steps[1].name: duplicate step 'extract' (also workflows[0].steps[0])."),
    "duplicate tenant": (("{name: globex}", "{name: acme}"), "fleet.yaml: tenants[1]: duplicate tenant 'acme'"),
    "bad policy": (("policy: {retries: 3}", "policy: {retries: 3, patience: high}"),
                   "fleet.yaml: workflows[0].policy.patience: unknown key."),
    "unknown key": (("monitoring: false", "monitoring: false\n    colour: blue"),
                    "fleet.yaml: workflows[1].colour: unknown key."),
    "unknown tenant": (("tenant: globex\n    name: quality", "tenant: initech\n    name: quality"),
                       "fleet.yaml: workflows[1].tenant: unknown tenant 'initech'."),
    "sql step without database": ((', database: "secret:GLOBEX_DB"', ""),
                                  "fleet.yaml: workflows[1].steps[0].database: a sql step needs 'database'"),
    "python step without call": (('call: "tickwarden.examples_steps:extract", ', ""),
                                 "fleet.yaml: workflows[0].steps[0].call: a python step needs 'call'"),
    "bad call": (("tickwarden.examples_steps:extract", "tickwarden.examples_steps.extract"),
                 "fleet.yaml: workflows[0].steps[0].call: 'tickwarden.examples_steps.extract' is not of the form"),
    "bad secret ref": (('"secret:WAREHOUSE"', '"postgresql://u:p@h/db"'),
                       "fleet.yaml: workflows[0].steps[1].database: not a secret reference such as 'secret:NAME' (the value is not shown)."),
    "platform variable in a step": (('"secret:WAREHOUSE"', '"env:TICKWARDEN_DATABASE_URL"'),
                                    "fleet.yaml: workflows[0].steps[1].database: 'env:TICKWARDEN_DATABASE_URL' names a "
                                    "variable of the platform, which tenant resources may not use: store the value with "
                                    "`tickwarden secrets set TENANT TICKWARDEN_DATABASE_URL` and refer to it as "
                                    "'secret:TICKWARDEN_DATABASE_URL'."),
    "platform variable in a python step": (('params: {count: 3}}', 'params: {count: 3}, secrets: ["env:HOME"]}'),
                                           "fleet.yaml: workflows[0].steps[0].secrets[0]: 'env:HOME' names a variable"),
    "platform variable in a tenant channel": (('"secret:SLACK_TOKEN"', '"env:SLACK_TOKEN"'),
                                              "fleet.yaml: channels[0].secret_ref: 'env:SLACK_TOKEN' names a variable"),
    "bad name": (("name: nightly", "name: Nightly Job"), "fleet.yaml: workflows[0].name: 'Nightly Job' is not a valid name"),
    "yaml syntax": (("tenants:\n", "tenants:\n  - {name: [\n"), "fleet.yaml: YAML syntax error at line"),
    "wrong type": (("idle_timeout_seconds: 300", "idle_timeout_seconds: soon"),
                   "fleet.yaml: environments[0].idle_timeout_seconds: input should be a valid integer"),
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_it_applies_a_file_and_reports_what_it_created(db, tmp_path):
    report = catalog.apply_file(db, write(tmp_path, GOOD), NOW)
    assert report.counts["tenant"]["created"] == 2 and report.counts["workflow"]["created"] == 2
    assert report.counts["channel"]["created"] == 2 and report.created == 12 and report.unchanged == 0
    with db.transaction() as store:
        nightly = store.catalog.get_workflow_by_name("acme", "nightly")
        schedule = store.catalog.get_schedule_for_workflow(nightly.id)
    assert [s["name"] for s in nightly.recipe["steps"]] == ["extract", "load"]
    assert nightly.recipe["steps"][1] == {"name": "load", "kind": "sql", "depends_on": ["extract"], "query": "SELECT 1",
                                          "database": "secret:WAREHOUSE", "timeout_seconds": None}
    assert nightly.policy_overrides == {"retries": 3}
    assert (schedule.cron, schedule.timezone, schedule.cadence_seconds, schedule.status) == (
        "0 2 * * *", "Europe/Berlin", 86400, "active")


def test_reapplying_the_same_file_changes_nothing(db, tmp_path):
    path = write(tmp_path, GOOD)
    catalog.apply_file(db, path, NOW)
    with db.transaction() as store:
        before = store.catalog.get_schedule_for_workflow(store.catalog.get_workflow_by_name("acme", "nightly").id)
    again = catalog.apply_file(db, path, datetime(2026, 11, 30, 13, 0, tzinfo=UTC))
    with db.transaction() as store:
        after = store.catalog.get_schedule_for_workflow(store.catalog.get_workflow_by_name("acme", "nightly").id)
    assert again.created == 0 and again.updated == 0 and again.unchanged == 12
    assert after == before   # same version, same updated_at


def test_an_edit_updates_only_what_changed_and_bumps_the_schedule_version(db, tmp_path):
    catalog.apply_file(db, write(tmp_path, GOOD), NOW)
    report = catalog.apply_file(db, write(tmp_path, GOOD.replace('"0 2 * * *"', '"0 3 * * *"')), NOW)
    assert report.counts["schedule"] == {"created": 0, "updated": 1, "unchanged": 1}
    assert report.counts["workflow"] == {"created": 0, "updated": 0, "unchanged": 2}
    with db.transaction() as store:
        schedule = store.catalog.get_schedule_for_workflow(store.catalog.get_workflow_by_name("acme", "nightly").id)
    assert schedule.version == 2 and schedule.cron == "0 3 * * *"


def test_each_invalid_file_is_one_sentence_and_writes_nothing(db, tmp_path):
    for case, ((old, new), expected) in sorted(BAD.items()):
        assert old in GOOD, case
        with pytest.raises(InvalidInput) as raised:
            catalog.apply_file(db, write(tmp_path, GOOD.replace(old, new, 1)), NOW)
        message = raised.value.message
        assert message.startswith(expected), f"{case}: {message}"
        assert "\n" not in message and message.endswith("."), f"{case}: {message}"
        assert "u:p@" not in message
        with db.transaction() as store:
            assert set(catalog_counts(store).values()) == {0}, case


def test_a_missing_file_is_one_sentence(db, tmp_path):
    with pytest.raises(InvalidInput, match=r"nope\.yaml: no such file\."):
        catalog.apply_file(db, tmp_path / "nope.yaml", NOW)


def test_the_quickstart_example_applies_cleanly(db):
    report = catalog.apply_file(db, QUICKSTART, NOW)
    assert report.counts["workflow"]["created"] == 1
    with db.transaction() as store:
        workflow = store.catalog.get_workflow_by_name("acme", "quickstart")
    kinds = [(s["name"], s["kind"]) for s in workflow.recipe["steps"]]
    assert kinds == [("extract", "python"), ("check", "python"), ("summarize", "python")]
    # The quickstart must run green as written: no step may need a secret the user has not set.
    assert "env:" not in QUICKSTART.read_text() and "secret:" not in QUICKSTART.read_text()


def test_run_now_queues_a_manual_run_with_the_profile_budget(db, tmp_path):
    catalog.apply_file(db, write(tmp_path, GOOD), NOW)
    run = catalog.run_now(db, "acme", "nightly", NOW, requested_by="ops")
    assert run.manual and run.status == "queued" and run.retry_budget == 3 and run.requested_by == "ops"
    # who asked is the caller's own text: stored redacted, on one line, as a canceller is
    asked = catalog.run_now(db, "acme", "nightly", NOW, requested_by="acme:ana@acme.test\ntoken=hunter2")
    assert asked.requested_by == "acme:[email] token=[redacted]"
    unmonitored = catalog.run_now(db, "globex", "quality", NOW)
    assert unmonitored.retry_budget == 0 and unmonitored.deadline_at > NOW


def test_unknown_names_are_one_sentence(db, tmp_path):
    catalog.apply_file(db, write(tmp_path, GOOD), NOW)
    with pytest.raises(NotFound, match=r"^No tenant named 'initech'\.$"):
        catalog.run_now(db, "initech", "nightly", NOW)
    with pytest.raises(NotFound, match=r"^Tenant 'acme' has no workflow named 'daily'\.$"):
        catalog.pause(db, "acme", "daily", NOW)
    with pytest.raises(InvalidInput, match="TENANT/WORKFLOW"):
        catalog.parse_ref("acme")


def test_pause_and_resume_are_idempotent(db, tmp_path):
    catalog.apply_file(db, write(tmp_path, GOOD), NOW)
    first = catalog.pause(db, "acme", "nightly", NOW)
    second = catalog.pause(db, "acme", "nightly", NOW)
    assert first.status == second.status == "paused" and first.version == second.version == 2
    assert catalog.resume(db, "acme", "nightly", NOW).version == 3
