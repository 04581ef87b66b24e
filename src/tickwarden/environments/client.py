"""The calling side of the execution protocol (see `runner.py`), shared by the local and the pod mode.

A client holds an address (`unix:PATH` or `tcp:HOST:PORT`) and the environment's
credential. It keeps the challenge the server issued in its last answer and names it in the
next request, sent without waiting for a greeting: one round trip per request, not two (the
greeting's is paid only by the first request, and after a request that got no answer or a
server that forgot the challenge). It also keeps the connection that answer came on, when the
server's signed answer says the server keeps it too, and sends the next request on it if that
comes within `KEEP_SECONDS` and nothing (a close) is waiting on it; else, and for a caller that
finds it taken by another, it connects anew. A kept connection whose send fails was closed by
the server before the request reached it: nothing ran, and the request goes on a new one. The waiting is the worker's half
of the watchdog: at the request's timeout, or when the caller aborts, it hangs up,
which is the server's signal to stop its process group; the server also enforces
the same limit itself (`watchdog_ms`), so a partitioned worker cannot leave a step
running. A local owner that can kill the process does so too (`on_give_up`).
"""

from __future__ import annotations

import hmac
import json
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from tickwarden.environments.runner import MAX_LINE, ProtocolError, envelope, opened, read_line, sign

POLL_SLICE = 0.2
CONNECT_SECONDS = 5.0
# The server's own limit comes a little after the caller's: the caller hangs up first, and the
# server's deadline is the backstop for a caller that vanished without hanging up.
WATCHDOG_GRACE = 0.5
# A connection kept after an answer carries the next request only if that comes within this many
# seconds: an older one may have been dropped on the way (a pod's network) without a word, and the
# server closes one idle for `runner.KEPT_SECONDS`, far longer, so it never closes one a request is sent on.
KEEP_SECONDS = 5.0


class EnvironmentFailed(Exception):
    """The environment could not be started or reached, or died while serving a request."""


class WatchdogTimeout(Exception):
    """The request ran past its timeout and the environment's process group was stopped."""


class Aborted(Exception):
    """The caller gave up on the request (lease lost, worker stopping); the process group was stopped."""


def parse_address(address: str) -> tuple[int, Any]:
    kind, _, where = address.partition(":")
    if kind == "unix" and where:
        return socket.AF_UNIX, where
    host, _, port = where.rpartition(":")
    if kind == "tcp" and host and port.isdigit():
        return (socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET), (host.strip("[]"), int(port))
    raise EnvironmentFailed(f"{address[:80]!r} is not an environment address (unix:PATH or tcp:HOST:PORT)")


def _reusable(sock: socket.socket, since: float) -> bool:
    """Whether a kept connection may carry the next request: young enough, and nothing from the
    server waiting on it (its close, or stray bytes: a server that no longer keeps it).

    A Unix socket is not looked at: a send to a closed one fails at once (EPIPE), before any of
    the request reaches a server, and the request then goes on a new connection."""
    if time.monotonic() - since > KEEP_SECONDS:
        return False
    if sock.family == socket.AF_UNIX:
        return True
    try:
        return not select.select([sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False


class ExecutionClient:
    """Authenticated requests to one environment's execution server."""

    def __init__(self, address: str, credential: bytes):
        self.address = address
        self.family, self.target = parse_address(address)
        self.credential = credential
        # The challenge the server issued in its last answer, for the next request (None: greeted instead).
        # Taken under the lock: threads sharing a client must never name one challenge twice.
        self._next: str | None = None
        self._next_lock = threading.Lock()
        # The connection the last answer came on, kept for the next request, and when it was kept (monotonic).
        self._idle: tuple[socket.socket, float] | None = None

    def close(self) -> None:
        """Close the kept connection, if any (the server sees an idle connection close: nothing stops)."""
        with self._next_lock:
            idle, self._idle = self._idle, None
        if idle is not None:
            idle[0].close()

    def call(self, request: dict[str, Any], timeout: float, should_abort: Callable[[], bool] | None = None, *,
             died: Callable[[], str | None] | None = None, on_give_up: Callable[[], None] | None = None,
             ) -> dict[str, Any]:
        """Send one request and return its answer, waiting at most `timeout` seconds.

        `died` says why the server is gone when the connection breaks (a local owner
        knows its exit status); `on_give_up` runs before WatchdogTimeout or Aborted.
        """
        deadline = time.monotonic() + timeout
        body = dict(request)
        body.setdefault("watchdog_ms", max(int((timeout + WATCHDOG_GRACE) * 1000), 1))
        # Taken, whatever happens next: a challenge is good once; so is a kept connection (one caller at a time).
        with self._next_lock:
            named, self._next = self._next, None
            idle, self._idle = self._idle, None
        if idle is not None and (named is None or not _reusable(*idle)):
            idle[0].close()
            idle = None
        while True:
            sock = idle[0] if idle is not None else socket.socket(self.family, socket.SOCK_STREAM)
            kept, idle, keep = idle is not None, None, False
            try:
                try:
                    buffer = bytearray()
                    if kept:  # a server that kept it never greets on it: the request names its challenge
                        assert named is not None
                        challenge = named
                        try:
                            sock.sendall(envelope(self.credential, "request", challenge, body, named=True))
                        except OSError:
                            # The server closed it (it went, or kept too many): the request never reached
                            # it whole, so nothing ran and the challenge is unused. A new connection.
                            continue
                    else:
                        sock.settimeout(min(CONNECT_SECONDS, max(timeout, 0.1)))
                        sock.connect(self.target)
                        sock.setblocking(False)
                        if named is not None:
                            challenge = named
                            sock.sendall(envelope(self.credential, "request", challenge, body, named=True))
                        else:
                            greeting = json.loads(read_line(sock, min(deadline, time.monotonic() + CONNECT_SECONDS),
                                                            buffer))
                            challenge = greeting["challenge"]
                            if not isinstance(challenge, str) or len(challenge) < 32:
                                raise ProtocolError("the greeting has no challenge")
                            sock.sendall(envelope(self.credential, "request", challenge, body))
                except (OSError, ValueError, KeyError, TypeError, ProtocolError):
                    reason = died() if died else None
                    raise EnvironmentFailed(reason or f"the environment at {self._where()} is not accepting work") from None
                line = self._wait(sock, buffer, deadline, should_abort, died, on_give_up)
                if named is not None and not kept and line.startswith(b'{"challenge"'):  # greeted anyway
                    line = self._wait(sock, buffer, deadline, should_abort, died, on_give_up)
                if named is not None and self._stale(named, line):
                    named = None  # the server forgot it (restarted, or issued many since) and ran nothing: greeted now
                    continue
                try:
                    answer = opened(self.credential, "answer", challenge, line)
                except ProtocolError:
                    if line.startswith(b'{"error"'):
                        if named is not None:  # unsigned: the server saw this challenge used (a replay, or a fault)
                            raise EnvironmentFailed("the environment refused the request's challenge as used already"
                                                    ) from None
                        raise EnvironmentFailed("the environment refused the request's credential") from None
                    raise EnvironmentFailed("the environment's answer does not carry its credential") from None
                # Kept only when the server said, in its signed answer, that it keeps it too, and nothing
                # followed the answer.
                keep = answer.pop("keep", None) is True and not buffer
                break
            finally:
                if keep:
                    with self._next_lock:
                        idle, self._idle = self._idle, (sock, time.monotonic())
                    if idle is not None:  # another caller's, kept meanwhile: one is enough
                        idle[0].close()
                else:
                    sock.close()
        issued = answer.pop("next", None)
        if isinstance(issued, str) and len(issued) >= 32:
            with self._next_lock:
                self._next = issued
        if answer.get("phase") == "watchdog":
            if on_give_up:
                on_give_up()
            raise WatchdogTimeout()
        return answer

    def _stale(self, named: str, line: bytes) -> bool:
        """Whether `line` is the server's refusal of the challenge `named`, signed: nothing ran, the request may go again."""
        if not line.startswith(b'{"error"'):
            return False
        try:
            stale = json.loads(line).get("stale")
        except (ValueError, AttributeError):
            return False
        return isinstance(stale, str) and hmac.compare_digest(stale, sign(self.credential, "stale", named, ""))

    def _wait(self, sock: socket.socket, buffer: bytearray, deadline: float, should_abort: Callable[[], bool] | None,
              died: Callable[[], str | None] | None, on_give_up: Callable[[], None] | None) -> bytes:
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if on_give_up:
                    on_give_up()
                raise WatchdogTimeout()
            if should_abort is not None and should_abort():
                if on_give_up:
                    on_give_up()
                raise Aborted()
            ready, _, _ = select.select([sock], [], [], min(remaining, POLL_SLICE))
            if not ready:
                continue
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                reason = died() if died else None
                raise EnvironmentFailed(reason or f"the environment at {self._where()} closed the connection "
                                                  "mid-request (it died or was restarted)")
            buffer += chunk
            if len(buffer) > MAX_LINE:
                raise EnvironmentFailed("the environment's answer is too long")
        line, _, rest = bytes(buffer).partition(b"\n")
        buffer[:] = rest
        return line

    def _where(self) -> str:
        return "its local socket" if self.family == socket.AF_UNIX else self.address
