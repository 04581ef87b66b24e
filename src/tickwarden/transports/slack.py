"""Slack through `slack_sdk.WebClient`: one thread per alert, the parent shows the state.

1. The first message of an alert on a channel is `chat.postMessage`; its `ts` is the
   thread key, and `<channel id>:<ts>` the parent reference.
2. A later event first updates the parent (`chat.update`) to show the current state,
   then replies with `chat.postMessage(thread_ts=…)`. Updating first keeps a retry
   harmless: an update repeats idempotently, whereas a reply that went out must not
   be followed by an error that makes the notifier post it again.

Channel config: `channel` (id or name, required), `base_url` (default Slack's API,
a local server in tests), `timeout` (seconds). A tenant's own `base_url` is a request
the platform makes from inside its network: it is checked before the client is made, and
each call then goes through `outbound.guarded_client` (the address checked at connect
time, no redirects, no proxy from the environment) instead of slack_sdk's urllib opener,
which would resolve the name again and follow a redirect anywhere. The bot token comes from the
channel's `secret_ref` (`env:NAME`) and is never logged or put in a message.

Never twice: every post carries Slack message metadata
`{"event_type": "tickwarden_delivery", "event_payload": {"delivery": <key>}}`, the
delivery's identity. When an earlier try of the delivery may have gone out (its sender
died between Slack's answer and the outbox recording it, or no answer came), the send
first looks the message up (`conversations.history` for a thread's first message,
`conversations.replies` for a reply, with `include_all_metadata`) and, when found,
returns that message's `ts` instead of posting again. The lookup needs the
`channels:history` scope (`groups:history` for a private channel) and the channel
given by its id; without them it fails permanently rather than risk a double post.

Buttons: the reply and the parent carry "View alert", "View run" and, while the alert
is open, "Acknowledge" (a signed link, see `ack_links`), for the links the notifier
passes (absolute URLs only: Slack refuses relative ones).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.request import Request

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


class _GuardedWebClient(WebClient):
    """A WebClient whose every request goes through `outbound.guarded_client`.

    slack_sdk sends each call through `_perform_urllib_http_request_internal(url, req)`
    and reads back `{"status", "headers", "body"}` (an HTTP error status included, as its
    urllib path turns one into the same dict): this is that seam, with the same answer.
    """

    def _perform_urllib_http_request_internal(self, url: str, req: Request) -> dict[str, Any]:
        headers = {key: str(value) for key, value in req.header_items() if key.lower() != "content-length"}
        body = req.data
        if body is not None and not isinstance(body, bytes):
            raise TypeError("slack_sdk sends its request bodies as bytes")
        with outbound.guarded_client(float(self.timeout)) as client:
            response = client.request(req.get_method(), req.full_url, content=body, headers=headers)
        return {"status": response.status_code, "headers": dict(response.headers), "body": response.text}


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
        guarded = channel.tenant_id is not None and bool(channel.config.get("base_url"))
        if guarded:
            try:
                outbound.check_url(base_url)
            except outbound.OutboundRefused as exc:
                raise TransportError(f"the Slack base_url was refused: {exc.message}", permanent=True) from None
        if not base_url.endswith("/"):
            base_url += "/"
        timeout = int(channel.config.get("timeout") or self.timeout)
        # retry_handlers=[]: the notifier owns retries, with back-off that survives restarts.
        return (_GuardedWebClient if guarded else WebClient)(token=token, base_url=base_url, timeout=timeout,
                                                             retry_handlers=[])

    def send(self, message: OutgoingMessage) -> Delivery:
        channel_id = str(config_value(message.channel, "channel"))
        client = self._client(message)
        rendered = message.rendered
        metadata = delivery_metadata(message.key)
        # No Acknowledge button once the alert is resolved (the parent shows the current state).
        actions = action_blocks(message.links, acknowledge=rendered.payload.get("alert", {}).get("status") != "resolved")
        reply_blocks = rendered.slack_blocks + actions
        parent_blocks = rendered.slack_parent_blocks + actions
        if message.thread is None:
            if message.maybe_sent:
                found = self._find_first(client, channel_id, message)
                if found is not None:
                    return Delivery(message_id=found, thread_key=found, parent_ref=f"{channel_id}:{found}")
            data = _call(client.chat_postMessage, channel=channel_id, text=rendered.slack_text,
                         blocks=reply_blocks, unfurl_links=False, unfurl_media=False, metadata=metadata)
            ts = str(data["ts"])
            posted_in = str(data.get("channel") or channel_id)
            return Delivery(message_id=ts, thread_key=ts, parent_ref=f"{posted_in}:{ts}")
        thread_ts = message.thread.key
        parent_channel, _, parent_ts = (message.thread.parent_ref or f"{channel_id}:{thread_ts}").rpartition(":")
        post_in = parent_channel or channel_id
        try:
            _call(client.chat_update, channel=post_in, ts=parent_ts,
                  text=rendered.slack_parent_text, blocks=parent_blocks)
        except _ParentGone as gone:
            log.warning("slack channel %s: the thread's parent cannot be updated (%s); replying anyway",
                        message.channel.label, gone)
        if message.maybe_sent:
            found = self._find_reply(client, post_in, thread_ts, message.key)
            if found is not None:
                return Delivery(message_id=found, thread_key=thread_ts, parent_ref=message.thread.parent_ref)
        data = _call(client.chat_postMessage, channel=post_in, thread_ts=thread_ts, text=rendered.slack_text,
                     blocks=reply_blocks, unfurl_links=False, unfurl_media=False, metadata=metadata)
        return Delivery(message_id=str(data["ts"]), thread_key=thread_ts, parent_ref=message.thread.parent_ref)

    def _find_first(self, client: WebClient, channel_id: str, message: OutgoingMessage) -> str | None:
        """Return the ts of this delivery's message among the channel's messages since its event, if any."""
        if not CHANNEL_ID.match(channel_id):
            raise TransportError(f"channel {message.channel.label}: an earlier try of a message may have been "
                                 "posted, and checking needs the channel's id (C…) in its config, not a name",
                                 permanent=True)
        args: dict[str, Any] = {"channel": channel_id, "include_all_metadata": True, "limit": LOOKUP_PAGE}
        if message.event_at is not None:
            # Slack's clock and ours may differ a little; the window only bounds the scan.
            args["oldest"] = f"{(message.event_at - LOOKUP_SKEW).timestamp():.6f}"
        return _scan(client.conversations_history, args, message.key)

    def _find_reply(self, client: WebClient, channel_id: str, thread_ts: str, key: str) -> str | None:
        """Return the ts of this delivery's reply in the thread, if an earlier try posted it."""
        args: dict[str, Any] = {"channel": channel_id, "ts": thread_ts, "include_all_metadata": True,
                                "limit": LOOKUP_PAGE}
        return _scan(client.conversations_replies, args, key)


# The Web API's own ids: C (public), G (private), D (direct); names cannot be looked up.
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{6,}$")
METADATA_EVENT = "tickwarden_delivery"
LOOKUP_PAGE = 200
LOOKUP_PAGES = 10
LOOKUP_SKEW = timedelta(minutes=10)


def delivery_metadata(key: str) -> dict[str, Any]:
    """The message metadata that names the delivery a message was posted for."""
    return {"event_type": METADATA_EVENT, "event_payload": {"delivery": key}}


def _scan(method: Any, args: dict[str, Any], key: str) -> str | None:
    """Page through a history or replies listing for the message posted with this delivery's metadata.

    A lookup that fails is an error like a post's (a permanent one disables the channel):
    posting without having looked could post the message twice.
    """
    cursor: str | None = None
    for _ in range(LOOKUP_PAGES):
        data = _call(method, **args, **({"cursor": cursor} if cursor else {}))
        for found in data.get("messages") or []:
            meta = found.get("metadata") if isinstance(found, dict) else None
            if (isinstance(meta, dict) and meta.get("event_type") == METADATA_EVENT
                    and isinstance(meta.get("event_payload"), dict)
                    and meta["event_payload"].get("delivery") == key and found.get("ts")):
                return str(found["ts"])
        cursor = str((data.get("response_metadata") or {}).get("next_cursor") or "") or None
        if not cursor:
            return None
    log.warning("the lookup of an earlier delivery stopped after %d pages; posting", LOOKUP_PAGES)
    return None


def action_blocks(links: Mapping[str, str], *, acknowledge: bool) -> list[dict[str, Any]]:
    """An actions block with a button per link given: view the alert, view the run, acknowledge."""
    labels = (("alert", "View alert", None), ("run", "View run", None), ("acknowledge", "Acknowledge", "primary"))
    buttons = []
    for name, label, style in labels:
        url = links.get(name) if links else None
        if not url or (name == "acknowledge" and not acknowledge):
            continue
        button: dict[str, Any] = {"type": "button", "action_id": f"tickwarden_{name}",
                                  "text": {"type": "plain_text", "text": label}, "url": url[:3000]}
        if style:
            button["style"] = style
        buttons.append(button)
    return [{"type": "actions", "elements": buttons}] if buttons else []


class _ParentGone(Exception):
    """The thread's parent message no longer exists in Slack."""


def _call(method: Any, **kwargs: Any) -> dict[str, Any]:
    """Call one Web API method; translate every failure into a TransportError."""
    try:
        response = method(**kwargs)
    except SlackApiError as exc:
        raise _translate(exc) from None
    except outbound.OutboundRefused as exc:  # a tenant's base_url that resolves elsewhere at connect time
        raise TransportError(f"the Slack base_url was refused: {exc.message}", permanent=True) from None
    except Exception as exc:  # network: refused, reset, timeout, a non-JSON error page
        # No answer: Slack may have taken the message, so the next try looks for it first.
        raise TransportError(f"slack is unreachable: {type(exc).__name__}: {exc}", permanent=False,
                             maybe_delivered=True) from None
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
