"""Notification channels: list them, and send a test message through one."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from tickwarden.api import convert
from tickwarden.api import schemas as s
from tickwarden.api.deps import MAX_ID, NAME_PATTERN, Scoped
from tickwarden.api.problems import Problem
from tickwarden.notifier import send_test_message
from tickwarden.sanitize import sanitize_error
from tickwarden.transports import TransportError

log = logging.getLogger(__name__)
router = APIRouter(tags=["channels"], responses=s.PROBLEMS)


@router.get("/api/channels", response_model=s.Page[s.ChannelOut], summary="List notification channels")
def list_channels(
    scope: Scoped,
    tenant: Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=s.MAX_LIMIT)] = s.DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> s.Page[s.ChannelOut]:
    after = s.decode_cursor(cursor, (int,))
    with scope.store() as store:
        channels = store.api.list_channels(tenant=scope.visible_tenant(tenant),
                                           after_id=after[0] if after else None, limit=limit + 1)
    page = channels[:limit]
    next_cursor = s.encode_cursor([page[-1].id]) if len(channels) > limit else None
    return s.Page[s.ChannelOut](items=[convert.channel_out(c) for c in page], next_cursor=next_cursor)


@router.post("/api/channels/{channel_id}/test", response_model=s.TestSendOut,
             summary="Send a test message through a channel's real transport")
def test_channel(scope: Scoped, request: Request,
                 channel_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> s.TestSendOut:
    with scope.store() as store:
        found = store.api.get_channel(channel_id)
    if found is None:
        raise Problem(404, "Not found", f"No channel {channel_id}.")
    transports = request.app.state.transports()
    transport = transports.get(found.kind)
    if transport is None:
        raise Problem(409, "Conflict", f"No transport is configured for channels of kind {found.kind!r}.")
    channel = found
    try:
        send_test_message(channel, transport, scope.clock.now(), dashboard_url=str(request.base_url).rstrip("/"))
    except TransportError as exc:
        return s.TestSendOut(channel_id=channel_id, delivered=False,
                             detail=sanitize_error(f"The test message was not delivered: {exc.message}"))
    except Exception as exc:  # a broken channel setting must read as "not delivered", not as a server error
        log.warning("test message on channel %s failed: %s", channel_id, type(exc).__name__)
        return s.TestSendOut(channel_id=channel_id, delivered=False,
                             detail=sanitize_error(f"The test message was not delivered: {type(exc).__name__}: {exc}"))
    return s.TestSendOut(channel_id=channel_id, delivered=True, detail="The test message was delivered.")
