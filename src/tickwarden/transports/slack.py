"""Slack through `slack_sdk.WebClient`: one thread per alert, the parent shows the state.

1. The first message of an alert on a channel is `chat.postMessage`; its `ts` is the
   thread key, and `<channel id>:<ts>` the parent reference.
2. A later event first updates the parent (`chat.update`) to show the current state,
   then replies with `chat.postMessage(thread_ts=…)`. Updating first keeps a retry
   harmless: an update repeats idempotently, whereas a reply that went out must not
   be followed by an error that makes the notifier post it again.

Channel config: `channel` (id or name, required), `base_url` (default Slack's API,
a local server in tests), `timeout` (seconds). The bot token comes from the
channel's `secret_ref` (`env:NAME`) and is never logged or put in a message.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from tickwarden import outbound
from tickwarden.transports.base import Delivery, OutgoingMessage, TransportError, channel_secret, config_value

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://slack.com/api/"
# Errors that retrying cannot fix: the channel is disabled until someone repairs it.
PERMANENT_ERRORS = frozenset({
    "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "no_permission",
    "missing_scope", "channel_not_found", "not_in_channel", "is_archived", "restricted_action",
    "team_access_not_granted", "ekm_access_denied",
})
# Errors about one message (invalid_blocks, msg_too_long, …) are not here on purpose:
# they say nothing about the channel, so they are retried and end as one dead row.
# The parent message is gone or cannot be edited: replies still work, so carry on.
PARENT_GONE_ERRORS = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})


class SlackTransport:
    """Post and update messages in Slack threads."""

    def __init__(self, *, base_url: str | None = None, timeout: int = 10):
        self.base_url = base_url
        self.timeout = timeout

    def _client(self, message: OutgoingMessage) -> WebClient:
        channel = message.channel
        token = channel_secret(message)
        if not token:
            raise TransportError(f"channel {channel.label} has no secret_ref for its Slack token", permanent=True)
        base_url = str(channel.config.get("base_url") or self.base_url or DEFAULT_BASE_URL)
        if channel.tenant_id is not None and channel.config.get("base_url"):
            try:
                outbound.check_url(base_url)
            except outbound.OutboundRefused as exc:
                raise TransportError(f"the Slack base_url was refused: {exc.message}", permanent=True) from None
        if not base_url.endswith("/"):
            base_url += "/"
        timeout = int(channel.config.get("timeout") or self.timeout)
        # retry_handlers=[]: the notifier owns retries, with back-off that survives restarts.
        return WebClient(token=token, base_url=base_url, timeout=timeout, retry_handlers=[])

    def send(self, message: OutgoingMessage) -> Delivery:
        channel_id = str(config_value(message.channel, "channel"))
        client = self._client(message)
        rendered = message.rendered
        if message.thread is None:
            data = _call(client.chat_postMessage, channel=channel_id, text=rendered.slack_text,
                         blocks=rendered.slack_blocks, unfurl_links=False, unfurl_media=False)
            ts = str(data["ts"])
            posted_in = str(data.get("channel") or channel_id)
            return Delivery(message_id=ts, thread_key=ts, parent_ref=f"{posted_in}:{ts}")
        thread_ts = message.thread.key
        parent_channel, _, parent_ts = (message.thread.parent_ref or f"{channel_id}:{thread_ts}").rpartition(":")
        try:
            _call(client.chat_update, channel=parent_channel or channel_id, ts=parent_ts,
                  text=rendered.slack_parent_text, blocks=rendered.slack_parent_blocks)
        except _ParentGone as gone:
            log.warning("slack channel %s: the thread's parent cannot be updated (%s); replying anyway",
                        message.channel.label, gone)
        data = _call(client.chat_postMessage, channel=parent_channel or channel_id, thread_ts=thread_ts,
                     text=rendered.slack_text, blocks=rendered.slack_blocks, unfurl_links=False, unfurl_media=False)
        return Delivery(message_id=str(data["ts"]), thread_key=thread_ts, parent_ref=message.thread.parent_ref)


class _ParentGone(Exception):
    """The thread's parent message no longer exists in Slack."""


def _call(method: Any, **kwargs: Any) -> dict[str, Any]:
    """Call one Web API method; translate every failure into a TransportError."""
    try:
        response = method(**kwargs)
    except SlackApiError as exc:
        raise _translate(exc) from None
    except Exception as exc:  # network: refused, reset, timeout, a non-JSON error page
        raise TransportError(f"slack is unreachable: {type(exc).__name__}: {exc}", permanent=False) from None
    return dict(response.data) if isinstance(response.data, dict) else {}


def _translate(exc: SlackApiError) -> Exception:
    response = exc.response
    status = getattr(response, "status_code", 0) or 0
    data = response.data if isinstance(getattr(response, "data", None), dict) else {}
    code = str(data.get("error") or f"http_{status}")
    if code in PARENT_GONE_ERRORS:
        return _ParentGone(code)
    if status == 429 or code == "ratelimited":
        headers = {k.lower(): v for k, v in (getattr(response, "headers", None) or {}).items()}
        value = headers.get("retry-after")
        if isinstance(value, list):
            value = value[0] if value else None
        try:
            retry_after = float(value) if value is not None else None
        except ValueError:
            retry_after = None
        return TransportError("slack rate limited the channel (ratelimited)", permanent=False, retry_after=retry_after)
    if status >= 500 or code in ("fatal_error", "internal_error", "service_unavailable", "request_timeout"):
        return TransportError(f"slack answered {code} (HTTP {status})", permanent=False)
    if code in PERMANENT_ERRORS:
        return TransportError(f"slack refused the message: {code}", permanent=True)
    # An error Slack may clear on its own (or one we do not know): retry, and give up after max tries.
    return TransportError(f"slack refused the message: {code} (HTTP {status})", permanent=False)
