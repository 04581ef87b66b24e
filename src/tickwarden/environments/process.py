"""One warm environment process and the watchdog around each request to it.

The process runs `runner.py` with the environment's interpreter in its own session
(process group), so the watchdog can stop a hanging step together with anything
it spawned. Timeouts are measured on the monotonic clock: they bound real work of
a real process, whatever clock the scheduling logic runs on.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RUNNER = Path(__file__).with_name("runner.py")
POLL_SLICE = 0.2
START_TIMEOUT = 60.0


class EnvironmentFailed(Exception):
    """The environment process could not be started, or died while serving a request."""


class WatchdogTimeout(Exception):
    """The request ran past its timeout and the process was stopped."""


class Aborted(Exception):
    """The caller gave up on the request (lease lost, worker stopping); the process was stopped."""


class EnvironmentProcess:
    """A running execution server for one tenant."""

    def __init__(self, tenant_id: int, python: str | None = None, *, paths: list[str] | None = None,
                 env: dict[str, str] | None = None, cwd: str | None = None, uid: int | None = None,
                 gid: int | None = None):
        self.tenant_id = tenant_id
        self.python = python or sys.executable
        command = [self.python, "-u", str(RUNNER), "--tenant", str(tenant_id)]
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
            raise EnvironmentFailed(f"the environment interpreter {self.python} could not be started: {exc.strerror}") from None
        self._buffer = b""
        answer = self.call({"op": "ping"}, START_TIMEOUT)
        if answer.get("tenant_id") != tenant_id:
            self.kill()
            raise EnvironmentFailed("the environment process answered for another tenant")
        self.cold_start_ms = (time.monotonic() - started) * 1000

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, request: dict[str, Any], timeout: float, should_abort: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Send one request and wait for its answer, at most `timeout` seconds.

        On timeout or abort the whole process group is killed before raising, so a
        step that ignores signals or sleeps in C cannot outlive its watchdog.
        """
        deadline = time.monotonic() + timeout
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.kill()
            raise EnvironmentFailed("the environment process is not accepting work") from None
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WatchdogTimeout()
            if should_abort is not None and should_abort():
                self.kill()
                raise Aborted()
            ready, _, _ = select.select([fd], [], [], min(remaining, POLL_SLICE))
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                code = self.proc.wait()
                raise EnvironmentFailed(f"the environment process died (exit status {code})")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def kill(self) -> None:
        """Stop the process and everything it started, now."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        self._close_pipes()

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
