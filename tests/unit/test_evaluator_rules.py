"""The evaluator's decision rules, without a database."""

from datetime import UTC, datetime, timedelta

from tickwarden.evaluator import decide
from tickwarden.store.monitoring import EvaluationInput

NOW = datetime(2026, 11, 30, 2, 9, tzinfo=UTC)


def given(**overrides):
    values = dict(
        workflow_id=1, tenant_id=1, monitoring_enabled=True, policy_overrides={}, shadow=False, cadence_seconds=300,
        failures=0, first_failure_at=None, last_failure_run_id=None, last_failure_at=None, last_error_category=None,
        last_error=None, last_failed_step=None, success_run_id=None, success_at=None, alert_id=None,
        alert_severity=None, alert_owner=None, alert_failure_count=None, alert_escalate_after=None, owner_pinned=False,
    )
    if overrides.get("failures"):
        values.update(first_failure_at=NOW - timedelta(minutes=10), last_failure_run_id=9, last_failure_at=NOW,
                      last_error_category="step_error", last_error="boom")
    values.update(overrides)
    return EvaluationInput(**values)


def test_it_waits_for_the_threshold_of_a_frequent_workflow():
    assert decide(given(failures=2), NOW).verdict == "not_yet"
    decision = decide(given(failures=3), NOW)
    assert decision.verdict == "alert" and decision.severity == "warning"
    assert decision.open.escalate_at == NOW + timedelta(seconds=6 * 300)
    assert decision.open.owner == "customer" and decision.open.failure_count == 3


def test_it_alerts_a_daily_workflow_critical_at_the_first_failure():
    decision = decide(given(cadence_seconds=86400, failures=1, last_error_category="connection"), NOW)
    assert (decision.verdict, decision.severity, decision.open.owner) == ("alert", "critical", "engineering")


def test_a_workflow_without_schedule_is_treated_as_daily():
    assert decide(given(cadence_seconds=None, failures=1), NOW).severity == "critical"


def test_overrides_move_the_threshold():
    assert decide(given(failures=3, policy_overrides={"alert_after": 5}), NOW).verdict == "not_yet"


def test_it_resolves_on_success_only_when_an_alert_is_open():
    assert decide(given(success_run_id=4), NOW).verdict == "none"
    decision = decide(given(success_run_id=4, alert_id=7, alert_severity="warning"), NOW)
    assert decision.verdict == "resolve" and decision.resolve == (7, 4)


def test_it_updates_an_open_alert_only_with_more_failures_and_escalates_at_the_threshold():
    open_alert = dict(alert_id=7, alert_severity="warning", alert_owner="customer", alert_escalate_after=6)
    same = decide(given(failures=4, alert_failure_count=4, **open_alert), NOW)
    assert same.update is None and same.escalate_alert_id is None
    more = decide(given(failures=5, alert_failure_count=4, **open_alert), NOW)
    assert more.update.failure_count == 5 and more.escalate_alert_id is None
    assert decide(given(failures=6, alert_failure_count=5, **open_alert), NOW).escalate_alert_id == 7


def test_a_pinned_owner_is_kept_and_an_unpinned_one_follows_the_category():
    base = dict(failures=5, alert_failure_count=4, alert_id=7, alert_severity="critical", alert_owner="customer",
                alert_escalate_after=6, last_error_category="connection")
    assert decide(given(**base), NOW).update.owner == "engineering"
    assert decide(given(owner_pinned=True, **base), NOW).update.owner == "customer"


def test_monitoring_disabled_decides_nothing():
    assert decide(given(failures=10, monitoring_enabled=False), NOW).verdict == "none"


def test_errors_are_sanitized_on_the_alert():
    decision = decide(given(cadence_seconds=86400, failures=1, last_error="login failed password=hunter2"), NOW)
    assert "hunter2" not in decision.open.error
