"""What a notification says: one alert event rendered for Slack, email and webhooks.

The notifier knows nothing about what caused an event; it hands this module the
alert's state and the event, and gets back a `Rendered` message: a subject (one
per alert, so mail clients thread it), plain text, Slack mrkdwn blocks for the
reply and for the thread's parent (the alert's current state), and a JSON payload.

Every free text that came from a failure (the error, the log tail, a reassignment
note) is sanitized again here, even though it was sanitized when stored: a message
leaves tickwarden, so this is the last place to stop a secret or a customer value.
Step outputs and recipe parameters are never read at all.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jinja2

from tickwarden.clock import isoformat_z
from tickwarden.sanitize import sanitize_error, sanitize_log_tail

# A message carries a bounded tail: chat and mail are not log viewers.
MESSAGE_LOG_LINES = 15
MESSAGE_LOG_CHARS = 1500
EVENT_KINDS = ("opened", "escalated", "reassigned", "acknowledged", "snoozed", "paused", "noted", "resolved", "test")
# Events a person caused (besides a reassignment): the message says who, and their note.
BY_HAND = ("acknowledged", "snoozed", "paused", "noted")
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class AlertMessage:
    """The facts of one event of one alert, as a message presents them."""

    alert_id: int
    tenant: str
    workflow: str
    event: str                      # one of EVENT_KINDS
    event_at: datetime
    severity: str                   # at the event
    owner: str                      # at the event
    status: str                     # the alert's status now: open | resolved
    current_severity: str
    current_owner: str
    failure_count: int
    first_failure_at: datetime | None
    last_failure_at: datetime | None
    opened_at: datetime | None
    resolved_at: datetime | None = None
    downtime_seconds: int | None = None
    actor: str = "tickwarden"
    note: str | None = None
    error: str | None = None
    error_category: str | None = None
    failed_step: str | None = None
    log_tail: str | None = None
    shadow: bool = False
    dashboard_url: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def link(self) -> str:
        # The dashboard's alert page: the one address a reader of any transport can open.
        return f"{self.dashboard_url.rstrip('/')}/dashboard/alerts/{self.alert_id}"


@dataclass(frozen=True)
class Rendered:
    subject: str
    text: str
    slack_text: str
    slack_blocks: list[dict[str, Any]]
    slack_parent_text: str
    slack_parent_blocks: list[dict[str, Any]]
    payload: dict[str, Any]
    html: str = ""  # the mail's HTML alternative (autoescaped)


def format_duration(seconds: int | None) -> str:
    """Return a duration the way people say it: '7h 0m', '3m 20s', '2d 4h'."""
    if seconds is None:
        return "unknown"
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def slack_escape(value: object) -> str:
    """Escape the three characters Slack's mrkdwn treats as markup."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _time(value: datetime | None) -> str:
    return isoformat_z(value) or "—"


def slack_date(value: datetime | None) -> str:
    """A Slack date token: each reader sees the time in their own zone and format.

    `<!date^<epoch>^{date_short_pretty} {time}|<fallback>>`; the fallback (UTC) is what
    clients that cannot format the token, and notifications, show.
    """
    if value is None:
        return "—"
    utc = value.astimezone(UTC)
    return f"<!date^{int(utc.timestamp())}^{{date_short_pretty}} {{time}}|{utc:%Y-%m-%d %H:%M} UTC>"


@functools.cache
def _environment(flavour: str = "text") -> jinja2.Environment:
    """The template environment: `text` (mail, ISO times), `slack` (`| time` gives date tokens), `html`.

    Only the `html` one autoescapes: its output is markup, and every value in it is text.
    """
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tickwarden", "templates/messages"),
        autoescape=flavour == "html",  # plain text and mrkdwn; Slack escaping is explicit (`| slack`)
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters["slack"] = slack_escape
    env.filters["time"] = slack_date if flavour == "slack" else _time
    env.filters["duration"] = format_duration
    return env


def _clean(message: AlertMessage) -> dict[str, Any]:
    """Return the template variables, every free text sanitized again."""
    tail = sanitize_log_tail(message.log_tail, MESSAGE_LOG_LINES, MESSAGE_LOG_CHARS) if message.log_tail else ""
    return {
        "m": message,
        "error": sanitize_error(message.error) if message.error else "",
        "note": sanitize_error(message.note, 500) if message.note else "",
        "actor": sanitize_error(message.actor, 80),
        "failed_step": sanitize_error(message.failed_step, 80) if message.failed_step else "",
        "log_tail": tail,
        "headline": headline(message),
        "state": state_line(message),
        "subject": subject(message),
        "by_hand": BY_HAND + (("resolved",) if message.actor != "tickwarden" else ()),
    }


def subject(message: AlertMessage) -> str:
    """The severity and what happened, then the alert: `[CRITICAL] opened: acme/nightly-pipeline (alert #12)`.

    Mail clients thread the alert's messages by In-Reply-To and References (the email
    transport sets both), so the subject is free to say what each message is.
    """
    prefix = "[tickwarden shadow] " if message.shadow else ""
    label = "TEST" if message.event == "test" else message.severity.upper()
    return f"{prefix}[{label}] {message.event}: {message.tenant}/{message.workflow} (alert #{message.alert_id})"


def headline(message: AlertMessage) -> str:
    """One line saying what happened."""
    target = f"{message.tenant}/{message.workflow}"
    severity = message.severity.upper()
    if message.event == "opened":
        times = "time" if message.failure_count == 1 else "times in a row"
        return f"{severity} alert opened: {target} failed {message.failure_count} {times}"
    if message.event == "escalated":
        return f"Escalated to {severity}: {target} has failed {message.failure_count} times in a row"
    if message.event == "reassigned":
        return f"Reassigned to {message.owner}: {target}"
    actor = sanitize_error(message.actor, 80)
    if message.event == "acknowledged":
        return f"Acknowledged by {actor}: {target} (escalation stopped, the alert stays open)"
    if message.event == "snoozed":
        return f"Snoozed by {actor}: {target} (no escalation until then)"
    if message.event == "paused":
        return f"Paused by {actor}: {target} will not tick until it is resumed; the alert stays open"
    if message.event == "noted":
        return f"Note from {actor} on {target}"
    if message.event == "resolved" and message.actor != "tickwarden":
        return f"Resolved by {actor}: {target} after {format_duration(message.downtime_seconds)} of downtime"
    if message.event == "resolved":
        return f"Resolved: {target} succeeded again after {format_duration(message.downtime_seconds)} of downtime"
    if message.event == "test":
        return f"Test message from tickwarden for {target}"
    return f"{message.event}: {target}"


def state_line(message: AlertMessage) -> str:
    """The alert's current state in one line (what a Slack parent message shows)."""
    if message.status == "resolved":
        return (f"RESOLVED (was {message.current_severity.upper()}) · {message.failure_count} failure(s) · "
                f"downtime {format_duration(message.downtime_seconds)} · owner {message.current_owner}")
    return (f"{message.current_severity.upper()} · open · {message.failure_count} failure(s) · "
            f"owner {message.current_owner}")


def payload(message: AlertMessage, values: dict[str, Any]) -> dict[str, Any]:
    """The webhook body: stable field names, times in UTC ISO 8601."""
    return {
        "version": SCHEMA_VERSION,
        "event": message.event,
        "at": _time(message.event_at),
        "alert": {
            "id": message.alert_id,
            "status": message.status,
            "severity": message.current_severity,
            "owner": message.current_owner,
            "failure_count": message.failure_count,
            "first_failure_at": isoformat_z(message.first_failure_at),
            "last_failure_at": isoformat_z(message.last_failure_at),
            "opened_at": isoformat_z(message.opened_at),
            "resolved_at": isoformat_z(message.resolved_at),
            "downtime_seconds": message.downtime_seconds,
            "shadow": message.shadow,
            "link": message.link,
        },
        "tenant": message.tenant,
        "workflow": message.workflow,
        "severity": message.severity,
        "owner": message.owner,
        "actor": values["actor"],
        "note": values["note"] or None,
        "error": values["error"] or None,
        "error_category": message.error_category,
        "failed_step": values["failed_step"] or None,
        "log_tail": values["log_tail"] or None,
        "summary": values["headline"],
    }


def _section(text: str) -> dict[str, Any]:
    # Slack caps a section's text at 3000 characters.
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def render(message: AlertMessage) -> Rendered:
    """Render one event of an alert for every transport."""
    values = _clean(message)
    env, slack_env = _environment(), _environment("slack")
    text = env.get_template("email.txt.j2").render(**values).strip() + "\n"
    html = _environment("html").get_template("email.html.j2").render(**values).strip() + "\n"
    slack_text = slack_env.get_template("slack_reply.md.j2").render(**values).strip()
    parent_text = slack_env.get_template("slack_parent.md.j2").render(**values).strip()
    blocks = [_section(slack_text)]
    # the resolved reply says it is over; the failure's log was in the thread already
    if values["log_tail"] and message.event != "resolved":
        blocks.append(_section("```" + slack_escape(values["log_tail"]).replace("```", "'''") + "```"))
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": slack_escape(message.link)}]})
    parent_blocks = [
        _section(parent_text),
        {"type": "context", "elements": [{"type": "mrkdwn", "text": slack_escape(message.link)}]},
    ]
    return Rendered(
        subject=values["subject"],
        text=text,
        slack_text=slack_text,
        slack_blocks=blocks,
        slack_parent_text=parent_text,
        slack_parent_blocks=parent_blocks,
        payload=payload(message, values),
        html=html,
    )
