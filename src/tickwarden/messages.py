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
from typing import Any, Protocol

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
class TickFacts:
    """Which tick an alert is about and what was last seen of it: the one source of these facts.

    Built from `store.alert_tick_facts` (one query) by `tick_facts`, and read by every
    transport's message and by the dashboard's alert page alike. `due_at` is the tick
    itself for a scheduled run (when it was due to start) and the request time for a
    manual one; `deadline_expired_at` is set only when the verdict was `missed` (no
    outcome by the run's deadline, or a tick that never ran). The attempt fields
    describe the newest attempt of the failing run, whatever its status; they are
    None when no attempt was ever made. `log_tail` is the failing step's log as
    stored (already sanitized once) and is sanitized and bounded again at render.
    """

    run_id: int | None = None
    tick: datetime | None = None
    manual: bool = False
    run_status: str | None = None
    due_at: datetime | None = None
    deadline_at: datetime | None = None
    deadline_expired_at: datetime | None = None
    attempt_number: int | None = None
    attempt_status: str | None = None
    attempt_worker: str | None = None
    attempt_started_at: datetime | None = None
    attempt_finished_at: datetime | None = None
    failed_step: str | None = None
    log_tail: str | None = None
    recovered_by_run_id: int | None = None
    recovered_tick: datetime | None = None
    recovered_manual: bool = False
    recovered_at: datetime | None = None


def tick_facts(row: dict[str, Any] | None) -> TickFacts:
    """Turn one row of `store.alert_tick_facts` into `TickFacts` (empty facts for no row)."""
    if not row:
        return TickFacts()
    missed = row.get("run_status") == "missed"
    return TickFacts(
        run_id=row.get("run_id"),
        tick=row.get("tick"),
        manual=bool(row.get("manual")),
        run_status=row.get("run_status"),
        due_at=row.get("tick"),
        deadline_at=row.get("deadline_at"),
        deadline_expired_at=row.get("deadline_at") if missed else None,
        attempt_number=row.get("attempt_number"),
        attempt_status=row.get("attempt_status"),
        attempt_worker=row.get("attempt_worker"),
        attempt_started_at=row.get("attempt_started_at"),
        attempt_finished_at=row.get("attempt_finished_at"),
        failed_step=row.get("failed_step"),
        log_tail=row.get("log_tail"),
        recovered_by_run_id=row.get("recovered_by_run_id"),
        recovered_tick=row.get("recovered_tick"),
        recovered_manual=bool(row.get("recovered_manual")),
        recovered_at=row.get("recovered_at"),
    )


def message_log_tail(log: str | None) -> str:
    """The failing step's log as any message or the alert page shows it: redacted again, bounded."""
    return sanitize_log_tail(log, MESSAGE_LOG_LINES, MESSAGE_LOG_CHARS) if log else ""


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
    test: bool = False  # a self-test's synthetic alert: marked in every transport, needs no action
    facts: TickFacts = field(default_factory=TickFacts)

    @property
    def link(self) -> str:
        # The dashboard's alert page: the one address a reader of any transport can open.
        return f"{self.dashboard_url.rstrip('/')}/dashboard/alerts/{self.alert_id}"


class Rendered(Protocol):
    """One event as every transport would send it; each part is produced on its first read.

    A transport reads only its own parts (a Slack delivery renders no mail template, a
    mail delivery no Slack one), each at most once. Every transport reads the parts it
    sends before it contacts its provider, so a template error still fails the delivery
    before anything is sent, and the notifier retries it as it did any failed send.
    """

    @property
    def subject(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def html(self) -> str: ...  # the mail's HTML alternative (autoescaped); empty for none
    @property
    def slack_text(self) -> str: ...
    @property
    def slack_blocks(self) -> list[dict[str, Any]]: ...
    @property
    def slack_parent_text(self) -> str: ...
    @property
    def slack_parent_blocks(self) -> list[dict[str, Any]]: ...
    @property
    def payload(self) -> dict[str, Any]: ...


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
    # A resolution is short (recovered at, by which run): it never repeats the failure's log.
    tail = "" if message.event == "resolved" else message_log_tail(message.facts.log_tail or message.log_tail)
    facts = message.facts
    return {
        "m": message,
        "f": facts,
        "worker": sanitize_error(facts.attempt_worker, 120) if facts.attempt_worker else "",
        "attempt": attempt_line(facts),
        "recovery": recovery_line(message),
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


def attempt_line(facts: TickFacts) -> str:
    """The last observed attempt in one line: number, status, worker, start and end."""
    if facts.attempt_number is None:
        return "none: no attempt was made"
    worker = sanitize_error(facts.attempt_worker, 120) if facts.attempt_worker else "no worker"
    return (f"#{facts.attempt_number} ({facts.attempt_status or 'unknown'}) on {worker}, "
            f"started {_time(facts.attempt_started_at)}, ended {_time(facts.attempt_finished_at)}")


def recovery_line(message: AlertMessage) -> str:
    """How the alert ended, in one line: when it recovered and by which run (or by whom)."""
    if message.event != "resolved":
        return ""
    facts = message.facts
    at = _time(facts.recovered_at or message.resolved_at)
    if facts.recovered_by_run_id is not None:
        what = "manual run" if facts.recovered_manual else f"the tick of {_time(facts.recovered_tick)},"
        return f"recovered at {at} by {what} run {facts.recovered_by_run_id}"
    return f"resolved at {at} by {sanitize_error(message.actor, 80)}"


def subject(message: AlertMessage) -> str:
    """The severity and what happened, then the alert: `[CRITICAL] opened: acme/nightly-pipeline (alert #12)`.

    Mail clients thread the alert's messages by In-Reply-To and References (the email
    transport sets both), so the subject is free to say what each message is. A self-test's
    messages say so first, so that nobody acts on them.
    """
    prefix = "[tickwarden shadow] " if message.shadow else ""
    if message.test:
        prefix = "[tickwarden test] "
    label = "TEST" if message.event == "test" else message.severity.upper()
    return f"{prefix}[{label}] {message.event}: {message.tenant}/{message.workflow} (alert #{message.alert_id})"


def headline(message: AlertMessage) -> str:
    """One line saying what happened; a self-test's says first that it is a test."""
    line = _headline(message)
    if message.test and message.event != "test":
        return f"TEST (tickwarden selftest, no action needed): {line}"
    return line


def _headline(message: AlertMessage) -> str:
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
        "test": message.test or message.event == "test",
        "tick": tick_payload(message, values),
    }


def tick_payload(message: AlertMessage, values: dict[str, Any]) -> dict[str, Any]:
    """The tick facts of the webhook body (PagerDuty and Teams read them too)."""
    facts = message.facts
    body: dict[str, Any] = {
        "run_id": facts.run_id,
        "tick": isoformat_z(facts.tick),
        "manual": facts.manual,
        "due_at": isoformat_z(facts.due_at),
        "deadline_expired_at": isoformat_z(facts.deadline_expired_at),
        "last_attempt": None if facts.attempt_number is None else {
            "number": facts.attempt_number,
            "status": facts.attempt_status,
            "worker": values["worker"] or None,
            "started_at": isoformat_z(facts.attempt_started_at),
            "finished_at": isoformat_z(facts.attempt_finished_at),
        },
    }
    if message.event == "resolved":
        body["recovered"] = {
            "at": isoformat_z(facts.recovered_at or message.resolved_at),
            "run_id": facts.recovered_by_run_id,
            "tick": isoformat_z(facts.recovered_tick),
        }
    return body


def _section(text: str) -> dict[str, Any]:
    # Slack caps a section's text at 3000 characters.
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def _context(link: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": slack_escape(link)}]}


class _AlertRendered:
    def __init__(self, message: AlertMessage) -> None:
        self.message = message

    @functools.cached_property
    def values(self) -> dict[str, Any]:
        return _clean(self.message)

    def _template(self, flavour: str, name: str) -> str:
        return _environment(flavour).get_template(name).render(**self.values).strip()

    @functools.cached_property
    def subject(self) -> str:
        return str(self.values["subject"])

    @functools.cached_property
    def text(self) -> str:
        return self._template("text", "email.txt.j2") + "\n"

    @functools.cached_property
    def html(self) -> str:
        return self._template("html", "email.html.j2") + "\n"

    @functools.cached_property
    def slack_text(self) -> str:
        return self._template("slack", "slack_reply.md.j2")

    @functools.cached_property
    def slack_parent_text(self) -> str:
        return self._template("slack", "slack_parent.md.j2")

    @functools.cached_property
    def slack_blocks(self) -> list[dict[str, Any]]:
        blocks = [_section(self.slack_text)]
        tail = self.values["log_tail"]
        # the resolved reply says it is over; the failure's log was in the thread already
        if tail and self.message.event != "resolved":
            blocks.append(_section("```" + slack_escape(tail).replace("```", "'''") + "```"))
        blocks.append(_context(self.message.link))
        return blocks

    @functools.cached_property
    def slack_parent_blocks(self) -> list[dict[str, Any]]:
        return [_section(self.slack_parent_text), _context(self.message.link)]

    @functools.cached_property
    def payload(self) -> dict[str, Any]:
        return payload(self.message, self.values)


def render(message: AlertMessage) -> Rendered:
    """Return one event of an alert as every transport would send it (rendered as each reads it)."""
    return _AlertRendered(message)


@dataclass(frozen=True)
class PlatformAlertMessage:
    """One event of a platform alert: one of tickwarden's own loops ran on no replica for too long.

    Platform alerts concern no tenant and no workflow; they reach the platform's own
    channels only. Everything in them is tickwarden's (loop and replica names, times),
    and the replica names are sanitized all the same.
    """

    alert_id: int
    loop: str
    event: str                      # opened | resolved
    event_at: datetime
    opened_at: datetime
    last_pass_at: datetime | None   # the loop's newest pass on any replica when the alert opened
    stall_seconds: int              # the span without a pass that opens the alert
    replica: str                    # the replica whose watchdog opened (or resolved) it
    resolved_at: datetime | None = None
    dashboard_url: str = ""

    @property
    def link(self) -> str:
        # The overview lists every loop with its replicas and newest pass.
        return f"{self.dashboard_url.rstrip('/')}/dashboard"


def platform_headline(message: PlatformAlertMessage) -> str:
    if message.event == "resolved":
        down = format_duration(int(((message.resolved_at or message.event_at) - message.opened_at).total_seconds()))
        return f"Resolved: tickwarden's {message.loop} loop runs again (alert open for {down})"
    return (f"CRITICAL platform alert: tickwarden's {message.loop} loop has not run on any replica since "
            f"{_time(message.last_pass_at)} (allowed: {format_duration(message.stall_seconds)})")


class _PlatformRendered:
    html = ""  # a platform alert's mail is plain text only

    def __init__(self, message: PlatformAlertMessage) -> None:
        self.message = message

    @functools.cached_property
    def headline(self) -> str:
        return platform_headline(self.message)

    @functools.cached_property
    def replica(self) -> str:
        return sanitize_error(self.message.replica, 120)

    @functools.cached_property
    def subject(self) -> str:
        return f"[tickwarden platform] loop {self.message.loop}: platform alert #{self.message.alert_id}"

    @functools.cached_property
    def text(self) -> str:
        message = self.message
        lines = [self.headline, "", f"Loop:           {message.loop}", f"Event:          {message.event}",
                 "Severity:       critical", "Owner:          engineering (the platform team)",
                 f"Last pass:      {_time(message.last_pass_at)}", f"Opened at:      {_time(message.opened_at)}"]
        if message.event == "resolved":
            lines += [f"Resolved at:    {_time(message.resolved_at)}", f"Resolved by:    {self.replica}"]
        else:
            lines += [f"Noticed by:     {self.replica}",
                      "Whatever this loop does is not happening on any replica until it passes again."]
        lines += ["", f"Details: {message.link}"]
        return "\n".join(lines) + "\n"

    @functools.cached_property
    def slack_text(self) -> str:
        icon = ":white_check_mark:" if self.message.event == "resolved" else ":rotating_light:"
        return f"{icon} *{slack_escape(self.headline)}*"

    @functools.cached_property
    def slack_blocks(self) -> list[dict[str, Any]]:
        return [_section(slack_escape(self.text)), _context(self.message.link)]

    @functools.cached_property
    def slack_parent_text(self) -> str:
        state = ("RESOLVED" if self.message.event == "resolved" else "CRITICAL · open") + f" · loop {self.message.loop}"
        return slack_escape(state)

    @functools.cached_property
    def slack_parent_blocks(self) -> list[dict[str, Any]]:
        return [_section(self.slack_parent_text), _context(self.message.link)]

    @functools.cached_property
    def payload(self) -> dict[str, Any]:
        message = self.message
        return {
            "version": SCHEMA_VERSION,
            "event": message.event,
            "at": _time(message.event_at),
            "platform": True,
            "platform_alert": {
                "id": message.alert_id, "loop": message.loop, "opened_at": isoformat_z(message.opened_at),
                "last_pass_at": isoformat_z(message.last_pass_at), "stall_seconds": message.stall_seconds,
                "resolved_at": isoformat_z(message.resolved_at), "replica": self.replica,
            },
            "alert": {"id": None, "status": "resolved" if message.event == "resolved" else "open",
                      "severity": "critical", "owner": "engineering", "link": message.link},
            "tenant": None,
            "workflow": f"loop:{message.loop}",
            "severity": "critical",
            "owner": "engineering",
            "summary": self.headline,
        }


def render_platform(message: PlatformAlertMessage) -> Rendered:
    """Return one event of a platform alert as every transport would send it (same parts as an alert's)."""
    return _PlatformRendered(message)
