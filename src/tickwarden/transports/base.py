"""The transport protocol, its one error type, and secret references.

A transport turns an `OutgoingMessage` (a rendered message, the channel it goes to
and the thread it belongs to, if any) into a `Delivery`: the provider's id for the
message and the key of the thread later messages reply in. A failure is a
`TransportError` that says whether retrying can help (`permanent=False`) or not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tickwarden.sanitize import sanitize_error
from tickwarden.secrets import platform_variable

if TYPE_CHECKING:
    from tickwarden.messages import Rendered
    from tickwarden.store.outbox import Channel


class TransportError(Exception):
    """A message could not be delivered.

    `permanent` errors (bad credentials, unknown channel, 4xx) disable the channel;
    others are retried with back-off, no earlier than `retry_after` seconds when the
    provider asked for that.
    """

    def __init__(self, message: str, permanent: bool = False, *, retry_after: float | None = None,
                 maybe_delivered: bool = False):
        super().__init__(sanitize_error(message))
        self.permanent = permanent
        self.retry_after = retry_after
        # No answer came (a timeout, a dropped connection): the provider may have taken the
        # message, so the next try looks for it first where the transport can.
        self.maybe_delivered = maybe_delivered

    @property
    def message(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Thread:
    """An existing conversation: the first message's key and what to update to show the state."""

    key: str
    parent_ref: str | None = None


@dataclass(frozen=True)
class OutgoingMessage:
    channel: Channel
    rendered: Rendered
    # the delivery's identity, stable across retries (the outbox row): idempotency keys, Message-IDs
    key: str
    alert_id: int | None
    thread: Thread | None
    sent_at: datetime
    # the value of a tenant channel's `secret:NAME`, resolved by the sender from the secret store
    secret_value: str | None = None
    # an earlier try of this delivery may have reached the provider: look before sending again
    maybe_sent: bool = False
    # when the event happened: no earlier try of this delivery can predate it
    event_at: datetime | None = None
    # buttons a transport may offer: "alert", "run" (dashboard pages), "acknowledge" (a signed link);
    # only absolute http(s) URLs are put here
    links: Mapping[str, str] = field(default_factory=dict)


def conversation(message: OutgoingMessage) -> str:
    """Name the conversation a message belongs to when no thread exists yet.

    `alert-<id>` for a tenant alert; `platform-alert-<id>` for a platform alert (which
    has no alert id), so two platform alerts never share one thread.
    """
    if message.alert_id is None:
        platform = message.rendered.payload.get("platform_alert")
        if isinstance(platform, dict) and platform.get("id") is not None:
            return f"platform-alert-{platform['id']}"
    return f"alert-{message.alert_id}"


@dataclass(frozen=True)
class Delivery:
    message_id: str
    thread_key: str
    parent_ref: str | None = None


@runtime_checkable
class Transport(Protocol):
    def send(self, message: OutgoingMessage) -> Delivery:
        """Deliver one message; raise TransportError when it cannot be delivered."""


def resolve_secret(ref: str | None, environ: dict[str, str] | None = None) -> str | None:
    """Return the value a secret reference (`env:NAME`) points to; None when there is no reference.

    A reference that cannot be resolved is a configuration error retrying will not
    fix, so it is a permanent TransportError. The value itself is never in a message.
    """
    if not ref:
        return None
    name = platform_variable(ref)
    if name is None:
        # The reference is not repeated: it may be a pasted value.
        raise TransportError("the secret reference is not of the form env:NAME or secret:NAME", permanent=True)
    value = (os.environ if environ is None else environ).get(name)
    if not value:
        raise TransportError(f"secret reference env:{name} is not set in the environment", permanent=True)
    return value


def channel_secret(message: OutgoingMessage) -> str | None:
    """Return the channel's secret: a tenant's `secret:NAME` as resolved for this message, or an `env:NAME`."""
    ref = message.channel.secret_ref
    if ref and ref.startswith("secret:"):
        if message.secret_value is None:
            raise TransportError(f"channel {message.channel.label}: its secret {ref.split(':', 1)[1]} could not be "
                                 "resolved; set it with `tickwarden secrets set`", permanent=True)
        return message.secret_value
    return resolve_secret(ref)


def config_value(channel: Channel, key: str, *, required: bool = True, default: object = None) -> object:
    """Return a channel setting, or a permanent error naming the missing key."""
    value = channel.config.get(key, default)
    if required and (value is None or value == ""):
        raise TransportError(f"channel {channel.label} has no {key!r} in its config", permanent=True)
    return value
