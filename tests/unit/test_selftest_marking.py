"""A self-test's messages say they are a test in every transport; no tenant may pose as one."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from tickwarden.errors import InvalidInput
from tickwarden.messages import AlertMessage, render
from tickwarden.reserved import is_selftest_tenant
from tickwarden.workflow_file import parse_text

T = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)
OPENED = AlertMessage(
    alert_id=3, tenant="tickwarden-selftest-0a1b2c3d", workflow="missed-tick", event="opened", event_at=T,
    severity="critical", owner="engineering", status="open", current_severity="critical",
    current_owner="engineering", failure_count=1, first_failure_at=T, last_failure_at=T, opened_at=T,
    error="no outcome by the run's deadline", error_category="missed", test=True,
)


def test_a_selftest_message_is_marked_as_a_test_in_subject_text_slack_and_payload():
    rendered = render(OPENED)
    assert rendered.subject == "[tickwarden test] [CRITICAL] opened: tickwarden-selftest-0a1b2c3d/missed-tick (alert #3)"
    assert rendered.text.startswith("TEST (tickwarden selftest, no action needed): CRITICAL alert opened")
    assert "TEST (tickwarden selftest, no action needed)" in rendered.slack_text
    assert rendered.payload["test"] is True
    assert rendered.payload["summary"].startswith("TEST (tickwarden selftest")


def test_an_ordinary_message_is_not_marked_as_a_test():
    rendered = render(dataclasses.replace(OPENED, tenant="acme", test=False))
    assert rendered.subject == "[CRITICAL] opened: acme/missed-tick (alert #3)"
    assert "TEST" not in rendered.text and rendered.payload["test"] is False


def test_the_channel_test_event_is_marked_as_a_test_too():
    assert render(dataclasses.replace(OPENED, event="test", test=False)).payload["test"] is True


@pytest.mark.parametrize("name", ["tickwarden-selftest", "tickwarden-selftest-0a1b2c3d", "tickwarden-selftestx"])
def test_a_tenant_file_cannot_take_a_selftest_name(name):
    assert is_selftest_tenant(name)
    with pytest.raises(InvalidInput, match="reserved for tickwarden selftest"):
        parse_text(f"tenants: [{{name: {name}}}]\n", "tenants.yaml", T)


def test_other_tenant_names_are_not_reserved():
    assert not is_selftest_tenant("tickwarden") and not is_selftest_tenant("acme-selftest")
    assert [t.name for t in parse_text("tenants: [{name: tickwarden}]\n", "tenants.yaml", T).tenants] == ["tickwarden"]
