"""The execution server inside a warm environment: one process per (tenant, environment).

Started with the environment's own interpreter, so it imports only the standard
library (and psycopg, lazily, for sql steps): by a worker as `PYTHON runner.py
--tenant ID --listen unix:PATH --lifeline` (local mode), or as the main process of an
environment's pod, `--listen tcp:0.0.0.0:7070 --credential-file FILE`. Both modes
speak one protocol over the socket, one request at a time on a connection:

    server → client   {"challenge": HEX}                       32 fresh random bytes
    client → server   {"body": REQUEST-JSON, "mac": HEX}       HMAC-SHA256(credential, "request" challenge body)
    server → client   {"body": ANSWER-JSON, "mac": HEX}        HMAC-SHA256(credential, "answer" challenge body)

Every answer's body also carries `next`: a challenge the server issues for a later connection,
good once. A client holding one sends its request at once, naming it, without waiting for a
greeting (one round trip per request instead of two):

    client → server   {"body": REQUEST-JSON, "mac": HEX, "challenge": NEXT}
    server → client   {"body": ANSWER-JSON, "mac": HEX}        signed with NEXT as the challenge

The server greets only a connection with nothing sent yet, and the client skips a greeting
that comes anyway. An answer's body also says whether the server `keep`s the connection for a
next request (it keeps `KEPT` at most, idle for `KEPT_SECONDS` at most, and closes a kept one
only then or when it exits, never under a client about to send); the client then sends its next
request on it, naming the challenge the answer issued (never greeted there): one challenge per
request still, and no connect, accept or close per request (a connection per request also drew
an unneeded greeting whenever the server looked before the request had arrived: 2 requests in 5).
Hanging up still means what it meant: mid-request it stops the step, between requests nothing. A named challenge the server did not issue, or forgot (it keeps the last
`ISSUED` only, and a restarted server none), is refused with
{"error", "stale": HMAC-SHA256(credential, "stale" NEXT "")} before anything runs, so the
client, which checks that MAC, may send the same request again with a greeting's challenge.
A challenge the server saw used (it remembers the last `USED`) is refused unsigned instead:
someone who recorded a request and replays it must not earn a signed "nothing ran" that
would make the client send a request that did run a second time.

The credential is the environment's alone (given on stdin by the local worker, or
mounted from the environment's Kubernetes Secret). A request is accepted only when
its MAC (compared in constant time) covers the challenge of its own connection, or a
challenge the server issued and that was never used before, so a recorded request cannot
be replayed, and the client checks the answer the same way, so nothing else listening on
the address can answer for the environment.

Requests (the body): {"op": "ping"} · {"op": "run", "tenant_id", "step", "inputs", "environment" (python:
the declared secrets and run variables), "secret_files" (python, in a pod: variable → key of the
environment's mounted Secret), "database_url", "platform_database", "timeout_ms" (sql), "watchdog_ms"}
· {"op": "shutdown"}. Answers: {"ok": true, ...} or {"ok": false, "error", "error_type",
"phase"} where phase is `resolve` (the call could not be imported), `connect`
(the database could not be reached), `refused` (it is the platform's own database), `timeout` (the server cancelled the query at
its statement timeout), `output` (not JSON), `step` (the step raised), `secret` (a pod's mounted Secret
does not hold the secret yet) or `watchdog` (the request ran
past `watchdog_ms`: the server answers, then stops with its whole process group).

The watchdog stays around each request inside the server: at `watchdog_ms`, or when
the client hangs up before its answer (the caller aborted), the server kills its
process group (within `_Watchdog.LOOK_SECONDS` of either), so neither a hung step nor anything it spawned outlives the
request. It serves one tenant only and refuses requests of another, and in local
mode it exits when its worker dies (the stdin lifeline closes or its parent
changes), so no orphan keeps running. Requests are served one at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import importlib
import io
import json
import logging
import os
import re
import secrets
import select
import signal
import socket
import sys
import threading
import time
import traceback

LOG_LINES = 200
MAX_LINE = 64 * 1024 * 1024  # one request or answer: inputs and outputs are bounded far below this
HANDSHAKE_SECONDS = 10.0  # a connection that does not send its request by then is dropped
# Connections a server keeps after answering on them, for their clients' next requests (a client keeps
# one at a time), and how long one is kept idle (longer than a client sends on one: `client.KEEP_SECONDS`).
KEPT = 16
KEPT_SECONDS = 30.0
ISSUED = 64  # challenges issued for later connections that a server keeps (the oldest go first)
USED = 4096  # challenges used that a server remembers, to refuse a replay of one unsigned
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


class ProtocolError(Exception):
    """The peer broke the protocol: a malformed line, a wrong MAC, or a closed connection."""


def sign(credential: bytes, role: str, challenge: str, body: str) -> str:
    """Return the MAC of one request or answer body, bound to its connection's challenge."""
    message = b"\n".join([role.encode(), challenge.encode(), body.encode()])
    return hmac.digest(credential, message, hashlib.sha256).hex()


dumps_str = json.JSONEncoder(default=str).encode
"""`json.dumps(value, default=str)`, the same text: `json.dumps` keeps only its plain defaults'
encoder made, and builds a new one at every call given `default` (a request and its answer
each, and a step's output at every attempt). The encoder keeps no state between calls, so
threads share it."""


_quoted = json.encoder.encode_basestring_ascii
"""A string as `json.dumps` writes it (quoted, escaped, ASCII): `envelope` writes its own two- or three-member
object with it, the same text `json.dumps` gives that dict, without an encoder's pass over a dict at every
request and answer (the MAC is a hex string, written as it is)."""


def envelope(credential: bytes, role: str, challenge: str, payload: dict, *, named: bool = False) -> bytes:
    """Return one signed line carrying `payload`; `named`: the line names its challenge (one the server issued).

    The line is `json.dumps({"body": BODY, "mac": MAC[, "challenge": CHALLENGE]})` and a newline, to the byte.
    """
    body = dumps_str(payload)
    line = '{"body": ' + _quoted(body) + ', "mac": "' + sign(credential, role, challenge, body)
    if named:
        return (line + '", "challenge": ' + _quoted(challenge) + "}\n").encode()
    return (line + '"}\n').encode()


def opened(credential: bytes, role: str, challenge: str, line: bytes | dict) -> dict:
    """Return the payload of a signed line (or of its envelope, parsed), or raise ProtocolError when it is not one of ours."""
    try:
        outer = json.loads(line) if isinstance(line, bytes) else line
        body, mac = outer["body"], outer["mac"]
        if not isinstance(body, str) or not isinstance(mac, str):
            raise TypeError
    except (ValueError, TypeError, KeyError):
        raise ProtocolError("the message is not a signed envelope") from None
    if not hmac.compare_digest(sign(credential, role, challenge, body), mac):
        raise ProtocolError("the message does not carry this environment's credential")
    try:
        payload = json.loads(body)
    except ValueError:
        raise ProtocolError("the message body is not JSON") from None
    if not isinstance(payload, dict):
        raise ProtocolError("the message body is not an object")
    return payload


def read_line(sock: socket.socket, deadline: float, buffer: bytearray) -> bytes:
    """Read one line by `deadline` (monotonic); ProtocolError on timeout, hang-up or an oversized line."""
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProtocolError("the peer did not send a line in time")
        try:  # what has arrived already is read without a wait (a kept connection's request was waited for)
            chunk = sock.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            select.select([sock], [], [], left)
            continue
        if not chunk:
            raise ProtocolError("the peer closed the connection")
        buffer += chunk
        if len(buffer) > MAX_LINE:
            raise ProtocolError("the line is too long")
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def _watch_parent(parent: int) -> None:
    # Polling getppid is portable; when the worker is killed we are re-parented.
    while True:
        if os.getppid() != parent:
            _exit_with_group(3)
        time.sleep(0.5)


# What this runner leaves behind in local mode and removes as it exits: its socket and, when the
# worker made the socket's directory for it alone (`--own-dir`), that directory. A worker that
# stops its environment removes them itself; one that was killed cannot.
_LEFT_BEHIND: list[str] = []


def _exit_with_group(code: int) -> None:
    # The worker starts us as a process group leader, so a step's subprocesses share
    # our group: they go with us, or a retry could repeat their side effects.
    for path in _LEFT_BEHIND:
        with contextlib.suppress(OSError):
            if os.path.isdir(path):
                os.rmdir(path)  # empty once the socket is gone; anything else put there stays, and so does it
            else:
                os.unlink(path)
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(code)


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-LOG_LINES:])


def _resolve(call: str):
    module_name, _, attr = call.partition(":")
    # A module imported whole already is taken as `import_module` takes it, less its four calls (its
    # checks of the name, its look in `sys.modules` and at the module's `_initializing`): any other
    # (not imported yet, being imported, None in `sys.modules`, a relative name) goes through it.
    module = sys.modules.get(module_name)
    if module is None or module_name.startswith(".") or getattr(getattr(module, "__spec__", None),
                                                                "_initializing", False):
        module = importlib.import_module(module_name)
    return getattr(module, attr)


@contextlib.contextmanager
def _variables(given: dict):
    """Expose the step's declared secrets and run variables for this call only.

    The process itself starts with next to nothing; what one step was given must
    not linger for the next step of the same environment. Afterwards every variable is
    as it was before: the ones the step was given or set itself are removed, and every
    earlier one the step changed or removed is set again. (Emptying the environment first
    did the same, and cost more than the rest of a no-op request: `os.environ.clear()`
    copies the key list to remove each key; so did setting every earlier variable again
    after each step.) Before and after are compared as `os.environ` keeps them, encoded
    (CPython's `_data`, a plain dict: copied and compared without decoding a variable);
    an interpreter without it compares the decoded mapping, the same way.
    """
    environ = os.environ
    data = getattr(environ, "_data", None)
    encodekey, encodevalue = getattr(environ, "encodekey", None), getattr(environ, "encodevalue", None)
    # What `os.environ`'s item assignment and deletion do, less their calls: the C-level variable set or
    # unset, and its encoded copy in `_data` kept the same (half of this block's cost went in `update`'s
    # and `__setitem__`'s frames, and in decoding a key only to have `__delitem__` encode it again).
    putenv, unsetenv = os.putenv, os.unsetenv
    if not isinstance(data, dict) or encodekey is None or encodevalue is None:
        data, encodekey, encodevalue = environ, str, str  # the decoded mapping: slower, the same outcome
        putenv, unsetenv = environ.__setitem__, environ.__delitem__  # type: ignore[assignment]
    saved = dict(data)
    for name, value in given.items():
        key, value = encodekey(str(name)), encodevalue(str(value))
        putenv(key, value)
        data[key] = value  # the decoded mapping's assignment set it already: the same again
    try:
        yield
    finally:
        if data != saved:
            for key in [key for key in data if key not in saved]:
                unsetenv(key)
                data.pop(key, None)  # the decoded mapping's deletion removed it already
            if data != saved:  # the step changed or removed an earlier variable itself
                for key, value in saved.items():
                    if data.get(key) != value:
                        putenv(key, value)
                        data[key] = value


def _run_python(step: dict, inputs: dict, given: dict | None = None) -> dict:
    with _variables(given or {}):
        return _call_python(step, inputs)


def _secret_files(names: object, directory: str | None) -> dict:
    """Read the step's declared secrets from the environment's mounted Secret (pod mode)."""
    if not names:
        return {}
    if not isinstance(names, dict) or directory is None:
        raise ValueError("this environment has no mounted secrets")
    values = {}
    for variable, key in names.items():
        if not isinstance(key, str) or not SECRET_KEY.match(key):
            raise ValueError("a secret key is not a valid Secret key")
        try:
            with open(os.path.join(directory, key), encoding="utf-8") as handle:
                values[str(variable)] = handle.read()
        except OSError:
            raise ValueError(f"the secret {key} is not in this environment's Secret (yet)") from None
    return values


_STEP_LOG_FORMAT = logging.Formatter("%(levelname)s %(name)s: %(message)s")
_NOWHERE = io.StringIO()
_step_handler: logging.StreamHandler | None = None


def _step_log_handler(buffer: io.StringIO) -> logging.StreamHandler:
    """The handler that writes what a step logs into `buffer`: one for the process's life, reset for each step.

    Made anew for every step it cost more than the rest of a no-op step's own work (a lock,
    a weak reference, a format check each time). Whatever a step did to it (its level, its
    filters, its format) is undone before the next step; it is attached to the root logger
    only while a step runs.
    """
    global _step_handler
    handler = _step_handler
    if handler is None:
        handler = _step_handler = logging.StreamHandler(_NOWHERE)
    handler.setFormatter(_STEP_LOG_FORMAT)
    handler.level = logging.NOTSET
    handler.filters.clear()
    handler.stream = buffer
    return handler


def _call_python(step: dict, inputs: dict) -> dict:
    try:
        fn = _resolve(step["call"])
    except Exception as exc:  # ImportError, AttributeError, anything the import raised
        return {"ok": False, "phase": "resolve", "error_type": type(exc).__name__, "error": str(exc)}
    buffer = io.StringIO()
    handler = _step_log_handler(buffer)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            output = fn(dict(step.get("params") or {}), inputs)
    except BaseException as exc:  # the step's own failure, whatever it is
        if isinstance(exc, KeyboardInterrupt):
            raise
        frames = traceback.format_exception_only(type(exc), exc)
        return {
            "ok": False,
            "phase": "step",
            "error_type": type(exc).__name__,
            "error": str(exc) or type(exc).__name__,
            "log": _tail(buffer.getvalue() + "".join(frames)),
        }
    finally:
        root.removeHandler(handler)
        handler.stream = _NOWHERE  # the step's log is not kept by the handler
    try:
        json.dumps(output)
    except (TypeError, ValueError) as exc:
        return {"ok": False, "phase": "output", "error_type": type(exc).__name__,
                "error": f"the step returned a value that is not JSON ({type(output).__name__})",
                "log": _tail(buffer.getvalue())}
    return {"ok": True, "output": output, "log": _tail(buffer.getvalue())}


# The same statement as the store's `secrets_platform_identity`: both sides must format alike.
IDENTITY = ("SELECT current_database() || '/' || current_setting('port') || '/' "
            "|| extract(epoch FROM pg_postmaster_start_time())::text")
# No apostrophes: redaction would take the text between two of them for a quoted value.
REFUSED = ("refused: this is the platform database of tickwarden, which no tenant step may use "
           "(store the URL of the tenant database with `tickwarden secrets set`)")


def _run_sql(step: dict, url: str, timeout_ms: int | None = None, platform: str | None = None) -> dict:
    try:
        import psycopg
    except ImportError as exc:
        return {"ok": False, "phase": "resolve", "error_type": type(exc).__name__,
                "error": "psycopg is not installed in this environment"}
    received = time.monotonic()
    try:
        conn = psycopg.connect(url, connect_timeout=max(2, min(10, int((timeout_ms or 10000) / 1000))))
    except psycopg.Error as exc:
        return {"ok": False, "phase": "connect", "error_type": type(exc).__name__, "error": str(exc)}
    try:
        with conn:
            with conn.cursor() as cur:
                # What the server says it is, after connecting: a URL can name the platform's
                # database in many spellings (another host alias, a socket, an IP), the server only one.
                if platform is not None:
                    cur.execute(IDENTITY)
                    row = cur.fetchone()
                    if row is not None and row[0] == platform:
                        return {"ok": False, "phase": "refused", "error_type": "PlatformDatabase", "error": REFUSED}
                if timeout_ms:
                    # The watchdog kills this process at the timeout, but the server would
                    # keep running the query; make the server give up by then too,
                    # counting the time the connection took.
                    left = max(int(timeout_ms - (time.monotonic() - received) * 1000), 1)
                    cur.execute("SELECT set_config('statement_timeout', %s, false)", (str(left),))
                cur.execute(step["query"])
                columns = [c.name for c in cur.description or []][:5]
                # Count rows without keeping them: values are customer data.
                rows = sum(1 for _ in cur) if cur.description else max(cur.rowcount, 0)
    except psycopg.errors.QueryCanceled as exc:
        return {"ok": False, "phase": "timeout", "error_type": type(exc).__name__, "error": str(exc)}
    except psycopg.OperationalError as exc:
        return {"ok": False, "phase": "connect", "error_type": type(exc).__name__, "error": str(exc)}
    except psycopg.Error as exc:
        return {"ok": False, "phase": "step", "error_type": type(exc).__name__, "error": str(exc)}
    finally:
        conn.close()
    return {"ok": True, "output": {"rows": rows, "columns": columns}, "log": f"{rows} rows"}


def handle(tenant_id: int, request: dict, secrets_dir: str | None = None) -> dict:
    """Answer one request (shutdown is the caller's to act on)."""
    op = request.get("op")
    if op == "shutdown":
        return {"ok": True}
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "tenant_id": tenant_id}
    if op == "run" and request.get("tenant_id") != tenant_id:
        return {"ok": False, "phase": "isolation", "error_type": "IsolationError",
                "error": "this environment serves another tenant"}
    if op == "run":
        step = request.get("step") or {}
        if step.get("kind") == "sql":
            url = request.get("database_url") or ""
            if request.get("database_secret"):
                try:
                    url = _secret_files({"url": request["database_secret"]}, secrets_dir)["url"].strip()
                except ValueError as exc:
                    return {"ok": False, "phase": "secret", "error_type": "SecretError", "error": str(exc)}
            return _run_sql(step, url, request.get("timeout_ms"), request.get("platform_database"))
        try:
            given = {**_secret_files(request.get("secret_files"), secrets_dir), **(request.get("environment") or {})}
        except ValueError as exc:
            return {"ok": False, "phase": "secret", "error_type": "SecretError", "error": str(exc)}
        return _run_python(step, request.get("inputs") or {}, given)
    return {"ok": False, "phase": "protocol", "error_type": "ProtocolError", "error": f"unknown op {op!r}"}


class _Watched:
    """One request under the watchdog: its connection, its deadline (monotonic; None: none) and how to answer it."""

    __slots__ = ("conn", "deadline", "answer", "done", "watching")

    def __init__(self, conn: socket.socket, seconds: float | None, answer):
        self.conn = conn
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.answer = answer
        self.done = False  # set (under the watchdog's lock) before the request's answer is sent
        self.watching = True  # False after stray bytes: the deadline only is kept


class _Watchdog:
    """Stop the whole process group when a request runs past its limit or its caller hangs up.

    One thread for the server's life, watching the request being served (requests are served
    one at a time): a thread started per request cost more than a no-op step. While requests
    keep coming it looks for the current one at least every `LOOK_SECONDS` by itself, and
    `watching` does not wake it: waking it through a pipe for every request cost two of its
    wake-ups per request (the request's start, and its connection's end), more than the rest
    of a no-op request's own work. After `IDLE_SECONDS` without a request it sleeps on that
    pipe, and the next request wakes it. So a request is watched within `LOOK_SECONDS` of its
    start (its deadline is then checked at least that often, and its caller's hang-up seen at
    once); a worker gives up on a request itself at its timeout, and the server's deadline
    comes the client's `WATCHDOG_GRACE` after that. Invariant: a request marked done (before its answer is
    sent) is never acted on, so a caller that hangs up after its answer, or a connection
    closed after it, stops nothing.
    """

    LOOK_SECONDS = 0.2
    IDLE_SECONDS = 2.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: _Watched | None = None
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._thread: threading.Thread | None = None
        self._parked = False  # the thread sleeps on the pipe until a request wakes it (under the lock)
        self._last = time.monotonic()  # when the last request started

    @contextlib.contextmanager
    def watching(self, conn: socket.socket, seconds: float | None, answer):
        """Watch the request on `conn` until the block ends (it ends before the answer is sent)."""
        watched = _Watched(conn, seconds, answer)
        with self._lock:
            self._current = watched
            self._last = time.monotonic()
            wake, self._parked = self._parked, False
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        elif wake:
            with contextlib.suppress(BlockingIOError):  # a wake-up already pending is enough
                os.write(self._wake_write, b"w")
        try:
            yield
        finally:
            with self._lock:
                watched.done = True
                if self._current is watched:
                    self._current = None

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 4096):
                pass

    def _loop(self) -> None:
        while True:
            with self._lock:
                watched = self._current
                idle = watched is None or watched.done
                if idle and time.monotonic() - self._last >= self.IDLE_SECONDS:
                    self._parked = True
                parked = self._parked
            if not idle:
                assert watched is not None
                self._look(watched)
            elif parked:
                select.select([self._wake_read], [], [])  # until the next request
                self._drain()
            else:
                select.select([self._wake_read], [], [], self.LOOK_SECONDS)  # for the next request to start
                self._drain()

    def _look(self, watched: _Watched) -> None:
        """One look at the request: at most 0.2 s, less when it ends, a new one starts or its deadline comes."""
        left = 0.2 if watched.deadline is None else min(0.2, watched.deadline - time.monotonic())
        if left <= 0:
            with self._lock:
                if watched.done:
                    return
            # Answer first (best effort), so the caller learns it was the watchdog, not a crash.
            watched.answer({"ok": False, "phase": "watchdog", "error_type": "WatchdogTimeout",
                            "error": "the request ran past its time limit"})
            _exit_with_group(4)
        waiting: list = [self._wake_read, watched.conn] if watched.watching else [self._wake_read]
        try:
            ready, _, _ = select.select(waiting, [], [], left)
        except (OSError, ValueError):  # the connection was closed: its request ended
            ready = [self._wake_read]
        if self._wake_read in ready:
            self._drain()
            return
        if not ready:
            return
        try:
            gone = not watched.conn.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            gone = True
        with self._lock:
            if watched.done:
                return
            if not gone:
                watched.watching = False  # stray bytes after the request: keep the deadline only
                return
        _exit_with_group(5)  # the caller gave up on the request: nothing may outlive it


class Server:
    """The listening side of the protocol: authenticate, run under the watchdog, answer."""

    def __init__(self, tenant_id: int, listener: socket.socket, credential: bytes, secrets_dir: str | None = None,
                 credential_file: str | None = None):
        self.tenant_id = tenant_id
        self.listener = listener
        self.credential = credential
        self.secrets_dir = secrets_dir
        self.credential_file = credential_file
        self.watchdog = _Watchdog()
        # Challenges issued in answers for later connections, each good once, oldest first (see the module).
        self._issued: dict[str, None] = {}
        self._used: dict[str, None] = {}
        self._issued_lock = threading.Lock()

    def _issue(self) -> str:
        challenge = secrets.token_hex(32)
        with self._issued_lock:
            self._issued[challenge] = None
            while len(self._issued) > ISSUED:
                del self._issued[next(iter(self._issued))]
        return challenge

    def _redeem(self, challenge: str) -> bool | None:
        """True when `challenge` was issued by this server and not used yet (it is used up now),
        None when it is one this server saw used, False when it is unknown (never issued, or forgotten)."""
        with self._issued_lock:
            if self._issued.pop(challenge, False) is None:
                self._used[challenge] = None
                while len(self._used) > USED:
                    del self._used[next(iter(self._used))]
                return True
            return None if challenge in self._used else False

    def _verified(self, challenge: str, line: bytes | dict) -> dict:
        """The request of `line`; with a mounted credential, read it again once before refusing.

        After the platform key rotates, the control plane rewrites the environment's Secret and
        the kubelet updates the mounted file: the running server follows without a restart.
        """
        try:
            return opened(self.credential, "request", challenge, line)
        except ProtocolError:
            if self.credential_file is None:
                raise
            fresh = _read_credential(self.credential_file)
            if fresh is None or hmac.compare_digest(fresh, self.credential):
                raise
            request = opened(fresh, "request", challenge, line)
            self.credential = fresh
            return request

    def serve_forever(self) -> None:
        """Serve connections one request at a time: new ones, and those kept after an answer.

        At most `KEPT` connections are kept, each for `KEPT_SECONDS` idle at most: past that
        many, an answer says the connection is not kept (the client then closes it), so the
        server never closes a connection its client may be sending a request on. One idle past
        `KEPT_SECONDS` is closed: its client no longer sends on it (`client.KEEP_SECONDS`).
        """
        kept: dict[socket.socket, float] = {}  # idle connections kept for a next request: since when (monotonic)
        try:
            while True:
                ready, _, _ = select.select([self.listener, *kept], [], [], KEPT_SECONDS if kept else None)
                for sock in ready:
                    if sock is self.listener:
                        conn, _ = self.listener.accept()
                    else:
                        conn = sock
                        del kept[conn]
                    served = self.serve_one(conn, keep=len(kept) < KEPT, readable=conn is sock)
                    if served == "keep":
                        kept[conn] = time.monotonic()
                        continue
                    conn.close()
                    if served == "shutdown":
                        return
                stale = time.monotonic() - KEPT_SECONDS
                for conn in [conn for conn, since in kept.items() if since < stale]:
                    del kept[conn]
                    conn.close()
        finally:
            for conn in kept:
                conn.close()

    def serve_one(self, conn: socket.socket, *, keep: bool = False, readable: bool = False) -> str | None:
        """Serve the one request `conn` carries: "shutdown" after a shutdown; "keep" when `keep` and
        the answer went out saying the connection is kept for a next request; else None (close it).
        `readable`: a kept connection found readable (its request, or its close, is there): never greeted."""
        challenge = ""
        # One answer per request, whoever sends it first (this thread, or the watchdog's at the deadline):
        # `sent` is read and set under `lock` only, so a plain flag (a `threading.Event` made per request,
        # with its condition and second lock, cost more than the rest of the request's bookkeeping).
        lock = threading.Lock()
        sent = False
        delivered = False  # the answer went out whole

        def answer(payload: dict) -> None:
            nonlocal delivered, sent
            with lock:
                if sent:
                    return
                sent = True
                try:
                    conn.sendall(envelope(self.credential, "answer", challenge,
                                          {**payload, "next": self._issue(), "keep": keep}))
                    delivered = True
                except OSError:
                    pass

        try:
            # A client holding an issued challenge has sent its request already: no greeting for it.
            if not readable and not select.select([conn], [], [], 0)[0]:
                challenge = secrets.token_hex(32)
                conn.sendall((json.dumps({"challenge": challenge}) + "\n").encode())
            line = read_line(conn, time.monotonic() + HANDSHAKE_SECONDS, bytearray())
            try:
                outer = json.loads(line)
            except ValueError:
                raise ProtocolError("the message is not a signed envelope") from None
            named = outer.get("challenge") if isinstance(outer, dict) else None
            if named is not None or not challenge:
                redeemed = self._redeem(named) if isinstance(named, str) else False
                if not isinstance(named, str) or not redeemed:
                    if redeemed is None:  # a replay: refused without a signature the client would trust
                        refusal = {"error": "the challenge was used already"}
                    else:
                        stale = sign(self.credential, "stale", named, "") if isinstance(named, str) else ""
                        refusal = {"error": "the challenge was not issued by this server", "stale": stale}
                    with contextlib.suppress(OSError):
                        conn.sendall((json.dumps(refusal) + "\n").encode())
                    return None
                challenge = named
            request = self._verified(challenge, outer)
        except (ProtocolError, OSError) as exc:
            with contextlib.suppress(OSError):
                conn.sendall((json.dumps({"error": str(exc)}) + "\n").encode())
            return None
        limit = request.get("watchdog_ms")
        seconds = limit / 1000 if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0 else None
        with self.watchdog.watching(conn, seconds, answer):
            result = handle(self.tenant_id, request, self.secrets_dir)
        answer(result)
        if request.get("op") == "shutdown":
            return "shutdown"
        return "keep" if keep and delivered else None


def listen(address: str) -> socket.socket:
    """Bind `unix:PATH` or `tcp:HOST:PORT` and return the listening socket."""
    kind, _, where = address.partition(":")
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(where)
        sock.bind(where)
        os.chmod(where, 0o600)
    elif kind == "tcp":
        host, _, port = where.rpartition(":")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), int(port)))
    else:
        raise SystemExit(f"--listen must be unix:PATH or tcp:HOST:PORT, not {address!r}")
    sock.listen(16)
    return sock


def _read_credential(path: str) -> bytes | None:
    try:
        with open(path, encoding="ascii") as handle:
            return bytes.fromhex(handle.read().strip())
    except (OSError, ValueError):
        return None


def _lifeline() -> None:
    # The worker holds our stdin open for as long as it lives: end of input means it died.
    while sys.stdin.buffer.read(65536):
        pass
    _exit_with_group(3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="tickwarden environment runner")
    parser.add_argument("--tenant", type=int, required=True)
    parser.add_argument("--path", action="append", default=[], help="extra import path")
    parser.add_argument("--listen", required=True, help="unix:PATH or tcp:HOST:PORT")
    parser.add_argument("--credential-file", help="file holding the environment's credential (hex)")
    parser.add_argument("--secrets-dir", help="directory of the environment's mounted Secret")
    parser.add_argument("--lifeline", action="store_true",
                        help="read the credential from the first line of stdin, then exit when stdin closes")
    parser.add_argument("--own-dir", action="store_true",
                        help="the unix socket's directory was made for this runner: remove it, with the socket, on exit")
    args = parser.parse_args(argv)
    # Imports resolve from the worker's working directory and the configured paths,
    # not from this file's folder.
    sys.path[0:1] = [os.getcwd(), *args.path]
    if args.credential_file:
        credential = _read_credential(args.credential_file) or b""
    elif args.lifeline:
        credential = bytes.fromhex(sys.stdin.buffer.readline().decode("ascii").strip())
    else:
        raise SystemExit("a credential is required: --credential-file or --lifeline")
    if len(credential) < 16:
        raise SystemExit("the credential is too short")
    listener = listen(args.listen)
    kind, _, where = args.listen.partition(":")
    if kind == "unix" and args.lifeline:
        _LEFT_BEHIND.append(os.path.abspath(where))  # absolute now: a step may change the working directory
        if args.own_dir:
            _LEFT_BEHIND.append(os.path.dirname(_LEFT_BEHIND[0]))
    # One line on stdout says the socket is bound; then stdout points at stderr, so stray
    # writes (C extensions, subprocesses) never reach the worker.
    sys.stdout.write("listening\n")
    sys.stdout.flush()
    os.dup2(2, 1)
    if not args.lifeline and os.getpgrp() != os.getpid():
        with contextlib.suppress(OSError):
            os.setsid()  # the watchdog stops "its process group": make that ours alone
    if args.lifeline:
        threading.Thread(target=_lifeline, daemon=True).start()
        threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    Server(args.tenant, listener, credential, args.secrets_dir, args.credential_file).serve_forever()
    _exit_with_group(0)


if __name__ == "__main__":
    main()
