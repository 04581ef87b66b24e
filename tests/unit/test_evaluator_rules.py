"""The evaluation's decision rules, without a database (escalation and pinned owners are the statements'
own: tests/integration/test_escalation.py and test_evaluation.py)."""

from datetime import UTC, datetime, timedelta

from tickwarden.alerts import decide
from tickwarden.store.monitoring import EvaluationInput, FailureUpdate, OpenAlert

NOW = datetime(2026, 11, 30, 2, 9, tzinfo=UTC)


def given(**overrides):
    values = dict(
        workflow_id=1, tenant_id=1, monitoring_enabled=True, policy_overrides={}, shadow=False, cadence_seconds=300,
        failures=0, first_failure_at=None, last_failure_run_id=None, last_failure_at=None, last_error_category=None,
        last_error=None, last_failed_step=None, success_run_id=None, success_at=None, alert_id=None,
        alert_failure_count=None,
    )
    if overrides.get("failures"):
        values.update(first_failure_at=NOW - timedelta(minutes=10), last_failure_run_id=9, last_failure_at=NOW,
                      last_error_category="step_error", last_error="boom")
    values.update(overrides)
    return EvaluationInput(**values)


def test_it_waits_for_the_threshold_of_a_frequent_workflow():
    assert decide(given(failures=2), NOW) is None
    opening = decide(given(failures=3), NOW)
    assert isinstance(opening, OpenAlert) and opening.severity == "warning"
    assert opening.escalate_at == NOW + timedelta(seconds=6 * 300)
    assert opening.owner == "customer" and opening.failure_count == 3


def test_it_alerts_a_daily_workflow_critical_at_the_first_failure():
    opening = decide(given(cadence_seconds=86400, failures=1, last_error_category="connection"), NOW)
    assert isinstance(opening, OpenAlert) and (opening.severity, opening.owner) == ("critical", "engineering")


def test_a_workflow_without_schedule_is_treated_as_daily():
    assert decide(given(cadence_seconds=None, failures=1), NOW).severity == "critical"


def test_overrides_move_the_threshold():
    assert decide(given(failures=3, policy_overrides={"alert_after": 5}), NOW) is None


def test_it_resolves_on_success_only_when_an_alert_is_open():
    assert decide(given(success_run_id=4), NOW) is None
    assert decide(given(success_run_id=4, alert_id=7), NOW) == (7, 4)


def test_it_updates_an_open_alert_only_with_more_failures_and_names_the_newest_failures_owner():
    assert decide(given(failures=4, alert_failure_count=4, alert_id=7), NOW) is None
    more = decide(given(failures=5, alert_failure_count=4, alert_id=7, last_error_category="connection"), NOW)
    assert isinstance(more, FailureUpdate) and (more.failure_count, more.owner) == (5, "engineering")


def test_monitoring_disabled_decides_nothing():
    assert decide(given(failures=10, monitoring_enabled=False), NOW) is None


def test_errors_are_sanitized_on_the_alert():
    decision = decide(given(cadence_seconds=86400, failures=1, last_error="login failed password=hunter2"), NOW)
    assert "hunter2" not in decision.error


def test_a_workflows_stored_overrides_text_gives_the_same_decision_as_its_dict():
    overrides = {"alert_after": 1, "first_severity": "critical"}
    as_text = decide(given(failures=1, policy_overrides='{"alert_after": 1, "first_severity": "critical"}'), NOW)
    as_dict = decide(given(failures=1, policy_overrides=overrides), NOW)
    assert isinstance(as_text, OpenAlert) and as_text == as_dict and as_text.severity == "critical"
