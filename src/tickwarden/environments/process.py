"""One warm environment process on this machine, spoken to over a Unix socket.

The process runs `runner.py` with the environment's interpreter in its own session
(process group), listening on a socket in the environment's own directory, with a
fresh credential given on its stdin; stdin then stays open as its lifeline. Every
request goes through the same authenticated protocol a pod's server speaks
(`client.py`), so the local mode tests that protocol for real. Besides the server's
own watchdog, the worker kills the whole process group itself at a request's
timeout or abort, so a step that ignores signals or sleeps in C cannot outlive it.
Timeouts are measured on the monotonic clock: they bound real work of a real
process, whatever clock the scheduling logic runs on.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tickwarden.environments.client import Aborted, EnvironmentFailed, ExecutionClient, WatchdogTimeout

RUNNER = Path(__file__).with_name("runner.py")
START_TIMEOUT = 60.0
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes


class EnvironmentProcess:
    """A running execution server for one tenant."""

    def __init__(self, tenant_id: int, python: str | None = None, *, paths: list[str] | None = None,
                 env: dict[str, str] | None = None, cwd: str | None = None, uid: int | None = None,
                 gid: int | None = None):
        self.tenant_id = tenant_id
        self.python = python or sys.executable
        self._own_dir: str | None = None
        where = cwd
        if where is None or len(os.path.join(where, "runner-00000000.sock")) > MAX_SOCKET_PATH:
            where = self._own_dir = tempfile.mkdtemp(prefix="tickwarden-env-")
            if uid is not None and gid is not None:
                os.chown(where, uid, gid)
        socket_path = self._socket = os.path.join(where, f"runner-{secrets.token_hex(4)}.sock")
        credential = secrets.token_bytes(32)
        # Bound by a name relative to its own directory: the process may not search the ancestors
        # of that directory (it runs as another user), yet it starts inside it.
        bind = os.path.basename(socket_path) if where == cwd else socket_path
        command = [self.python, "-u", str(RUNNER), "--tenant", str(tenant_id), "--listen", f"unix:{bind}",
                   "--lifeline", *(["--own-dir"] if self._own_dir is not None else [])]
        for path in paths or []:
            command += ["--path", path]
        started = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                cwd=cwd,
                # Dropped in the child before exec: the step never holds the worker's uid or groups.
                user=uid,
                group=gid,
                extra_groups=[] if uid is not None else None,
                umask=0o077 if uid is not None else -1,
            )
        except OSError as exc:
            self._remove_dir()
            raise EnvironmentFailed(f"the environment interpreter {self.python} could not be started: {exc.strerror}") from None
        self.client = ExecutionClient(f"unix:{socket_path}", credential)
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(credential.hex().encode() + b"\n")
            self.proc.stdin.flush()
            self._await_listening(started + START_TIMEOUT)
            answer = self.call({"op": "ping"}, max(started + START_TIMEOUT - time.monotonic(), 1.0))
        except (OSError, WatchdogTimeout):
            self.kill()
            raise EnvironmentFailed("the environment process did not start listening in time") from None
        except EnvironmentFailed:
            self.kill()
            raise
        if answer.get("tenant_id") != tenant_id:
            self.kill()
            raise EnvironmentFailed("the environment process answered for another tenant")
        self.cold_start_ms = (time.monotonic() - started) * 1000

    def _await_listening(self, deadline: float) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        received = b""
        while b"\n" not in received:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WatchdogTimeout()
            ready, _, _ = select.select([fd], [], [], min(left, 0.2))
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise EnvironmentFailed(f"the environment process died (exit status {self.proc.wait()})")
                received += chunk
        self.proc.stdout.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, request: dict[str, Any], timeout: float, should_abort: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Send one request and wait for its answer, at most `timeout` seconds.

        On timeout or abort the whole process group is killed before raising.
        """
        return self.client.call(request, timeout, should_abort, died=self._died, on_give_up=self.kill)

    def _died(self) -> str | None:
        """Why the server stopped answering: its exit status, if it exited (waiting briefly for it)."""
        try:
            code = self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            return None
        return f"the environment process died (exit status {code})"

    def kill(self) -> None:
        """Stop the process and everything it started, now."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        self.client.close()
        self._close_pipes()
        self._remove_dir()

    def stop(self, grace: float = 2.0) -> None:
        """Ask the server to exit; kill it if it does not within `grace` seconds."""
        if self.proc.poll() is None:
            try:
                self.call({"op": "shutdown"}, grace)
                self.proc.wait(grace)
            except (WatchdogTimeout, EnvironmentFailed, subprocess.TimeoutExpired, ValueError):
                pass
        self.kill()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass

    def _remove_dir(self) -> None:
        try:
            os.unlink(self._socket)
        except (OSError, AttributeError):
            pass
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None


__all__ = ["Aborted", "EnvironmentFailed", "EnvironmentProcess", "WatchdogTimeout"]
