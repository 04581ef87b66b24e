import dataclasses
from datetime import UTC, datetime

import pytest

from tickwarden.messages import AlertMessage, format_duration, render, slack_escape
from tickwarden.transports.base import TransportError, resolve_secret

T = datetime(2026, 11, 30, 2, 9, tzinfo=UTC)
OPENED = AlertMessage(
    alert_id=12, tenant="acme", workflow="nightly-pipeline", event="opened", event_at=T, severity="critical",
    owner="engineering", status="open", current_severity="critical", current_owner="engineering", failure_count=1,
    first_failure_at=T, last_failure_at=T, opened_at=T, error='relation "sales_daily" does not exist',
    error_category="step_error", failed_step="join", log_tail="\n".join(f"line {i}" for i in range(100)),
    dashboard_url="https://tw.example/",
)


def test_a_subject_says_the_severity_the_event_and_the_alert():
    subjects = [render(dataclasses.replace(OPENED, event=kind, severity=severity)).subject
                for kind, severity in (("opened", "warning"), ("escalated", "critical"), ("resolved", "critical"))]
    assert subjects == ["[WARNING] opened: acme/nightly-pipeline (alert #12)",
                        "[CRITICAL] escalated: acme/nightly-pipeline (alert #12)",
                        "[CRITICAL] resolved: acme/nightly-pipeline (alert #12)"]
    shadow = render(dataclasses.replace(OPENED, shadow=True)).subject
    assert shadow == "[tickwarden shadow] [CRITICAL] opened: acme/nightly-pipeline (alert #12)"


def test_slack_text_carries_date_tokens_and_mail_keeps_iso_times():
    rendered = render(OPENED)
    token = "<!date^1796004540^{date_short_pretty} {time}|2026-11-30 02:09 UTC>"
    assert token in rendered.slack_text and token in rendered.slack_parent_text
    assert "2026-11-30T02:09:00Z" not in rendered.slack_text + rendered.slack_parent_text
    assert "2026-11-30T02:09:00Z" in rendered.text and rendered.payload["at"] == "2026-11-30T02:09:00Z"


def test_the_resolved_reply_leaves_the_failure_log_out():
    opened = render(OPENED)
    assert "line 99" in str(opened.slack_blocks)
    resolved = render(dataclasses.replace(OPENED, event="resolved", status="resolved", resolved_at=T,
                                          downtime_seconds=600))
    blocks = str(resolved.slack_blocks)
    assert "line 99" not in blocks and "```" not in blocks and "sales_daily" not in resolved.slack_text
    assert "Resolved" in resolved.slack_text and "10m 0s" in resolved.slack_text


def test_the_html_part_is_autoescaped():
    rendered = render(dataclasses.replace(OPENED, error="<script>x</script>", log_tail="<b>bold</b>"))
    assert "<script>" not in rendered.html and "&lt;script&gt;" in rendered.html and "&lt;b&gt;" in rendered.html
    assert 'href="https://tw.example/dashboard/alerts/12"' in rendered.html


def test_the_opening_message_carries_the_facts_and_a_bounded_tail():
    rendered = render(OPENED)
    for fact in ("CRITICAL alert opened", "acme", "nightly-pipeline", "engineering", "Failure count:  1",
                 "2026-11-30T02:09:00Z", "sales_daily", "step join", "https://tw.example/dashboard/alerts/12"):
        assert fact in rendered.text, fact
    assert "line 99" in rendered.text and "line 80" not in rendered.text
    assert rendered.payload["log_tail"].count("\n") < 15


def test_a_resolution_says_how_long_it_was_down_and_the_parent_shows_it():
    rendered = render(dataclasses.replace(OPENED, event="resolved", status="resolved", resolved_at=T,
                                          downtime_seconds=7 * 3600))
    assert "after 7h 0m of downtime" in rendered.text and "Downtime:       7h 0m" in rendered.text
    assert "RESOLVED (was CRITICAL)" in rendered.slack_parent_text
    assert rendered.payload["alert"]["downtime_seconds"] == 25200 and rendered.payload["alert"]["status"] == "resolved"


def test_a_reassignment_carries_the_owner_and_a_sanitized_note():
    rendered = render(dataclasses.replace(OPENED, event="reassigned", owner="customer", actor="ana",
                                          note="their token=abc123 expired"))
    assert "Reassigned to customer" in rendered.text and "ana" in rendered.text
    assert "token=[redacted] expired" in rendered.text and "abc123" not in rendered.slack_text


def test_text_is_sanitized_again_at_render():
    rendered = render(dataclasses.replace(OPENED, error="auth failed password=hunter2 for 'Jane Doe 1984'",
                                          log_tail="Bearer abc.def.ghi\nuser jane@acme.example"))
    everything = rendered.text + rendered.slack_text + str(rendered.slack_blocks) + str(rendered.payload)
    for secret in ("hunter2", "Jane Doe", "abc.def.ghi", "jane@acme.example"):
        assert secret not in everything


def test_slack_markup_in_values_is_escaped():
    rendered = render(dataclasses.replace(OPENED, error="x < y && <!channel>"))
    assert "<!channel>" not in rendered.slack_text and "&lt;!channel&gt;" in rendered.slack_text
    assert slack_escape("<a&b>") == "&lt;a&amp;b&gt;"


def test_shadow_messages_say_so():
    rendered = render(dataclasses.replace(OPENED, shadow=True))
    assert rendered.subject.startswith("[tickwarden shadow]") and "shadow" in rendered.slack_text
    assert rendered.payload["alert"]["shadow"] is True


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (59, "59s"), (200, "3m 20s"), (25200, "7h 0m"),
                                          (90000, "1d 1h"), (None, "unknown")])
def test_durations_read_like_people_say_them(seconds, text):
    assert format_duration(seconds) == text


def test_secret_references_resolve_from_the_environment_only():
    assert resolve_secret("env:TOKEN", {"TOKEN": "v"}) == "v"
    assert resolve_secret(None, {}) is None
    with pytest.raises(TransportError) as missing:
        resolve_secret("env:TOKEN", {})
    assert missing.value.permanent and "env:TOKEN" in missing.value.message
    with pytest.raises(TransportError) as malformed:
        resolve_secret("vault:x", {})
    assert malformed.value.permanent


def test_the_details_link_is_a_page_the_dashboard_serves():
    from starlette.routing import Match

    from tickwarden.dashboard import router

    path = render(OPENED).payload["alert"]["link"].removeprefix("https://tw.example")
    scope = {"type": "http", "path": path, "method": "GET"}
    assert any(route.matches(scope)[0] is Match.FULL for route in router.routes), path


@pytest.mark.parametrize("kind,words", [
    ("acknowledged", "Acknowledged by ana"),
    ("snoozed", "Snoozed by ana"),
    ("paused", "Paused by ana"),
    ("noted", "Note from ana"),
    ("resolved", "Resolved by ana"),
])
def test_every_transport_renders_an_event_made_by_hand_with_who_and_the_note(kind, words):
    rendered = render(dataclasses.replace(OPENED, event=kind, actor="ana", note="rerun at 9, password=hunter2",
                                          status="resolved" if kind == "resolved" else "open"))
    for text in (rendered.text, rendered.slack_text, rendered.payload["summary"]):
        assert words in text, (kind, text)
    for text in (rendered.text, rendered.slack_text):
        assert "rerun at 9" in text and "hunter2" not in text
    assert rendered.payload["event"] == kind and rendered.payload["actor"] == "ana"
    assert "hunter2" not in rendered.payload["note"]
