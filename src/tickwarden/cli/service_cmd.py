"""`tickwarden serve`: the control plane of one replica (background loops, workers, the API)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tickwarden.cli import app
from tickwarden.clock import WallClock
from tickwarden.errors import InvalidInput

if TYPE_CHECKING:
    from tickwarden.db import Database

log = logging.getLogger("tickwarden.serve")

API_MODULE = "tickwarden.api.main"
WORKER_COMMAND = [sys.executable, "-c", "from tickwarden.cli import main; main()", "worker"]
WORKER_STOP_GRACE = 40.0


class WorkerSupervisor:
    """Keep N `tickwarden worker` child processes alive; restart those that die; stop them on exit."""

    def __init__(self, count: int, command: list[str] | None = None):
        self.count = count
        self.command = command or WORKER_COMMAND
        self.children: list[subprocess.Popen[bytes] | None] = [None] * count
        self.restarts = 0
        self._backoff = [1.0] * count
        self._started_at = [0.0] * count
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.count <= 0:
            return
        for slot in range(self.count):
            self._spawn(slot)
        self._thread = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)
        self._thread.start()

    def _spawn(self, slot: int) -> None:
        # A session of their own: only this supervisor decides when workers stop.
        self.children[slot] = subprocess.Popen(self.command, start_new_session=True)
        self._started_at[slot] = time.monotonic()

    def _watch(self) -> None:
        next_try = [0.0] * self.count
        while not self._stop.wait(0.5):
            for slot, child in enumerate(self.children):
                if child is None or child.poll() is None:
                    continue
                now = time.monotonic()
                if next_try[slot] == 0.0:
                    # A worker that died young is restarted with a growing back-off.
                    lived = now - self._started_at[slot]
                    self._backoff[slot] = 1.0 if lived > 60 else min(self._backoff[slot] * 2, 30.0)
                    next_try[slot] = now + self._backoff[slot]
                    log.warning("worker %d exited with status %s; restarting in %.0f s",
                                child.pid, child.returncode, self._backoff[slot])
                if now >= next_try[slot] and not self._stop.is_set():
                    next_try[slot] = 0.0
                    self.restarts += 1
                    self._spawn(slot)

    def stop(self, grace: float = WORKER_STOP_GRACE) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        live = [c for c in self.children if c is not None and c.poll() is None]
        for child in live:
            child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in live:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)


def api_available() -> bool:
    """True when the API package ships its application module."""
    try:
        return importlib.util.find_spec(API_MODULE) is not None
    except ModuleNotFoundError:
        return False


def build_api(db: Database, clock: WallClock, replica: str) -> Any:
    """Return the ASGI app: `create_app(...)` of the API module (given what it asks for) or its `app`."""
    module = importlib.import_module(API_MODULE)
    factory = getattr(module, "create_app", None)
    if factory is None:
        return module.app
    offered = {"db": db, "database": db, "clock": clock, "replica_id": replica}
    wanted = {name: offered[name] for name in inspect.signature(factory).parameters if name in offered}
    return factory(**wanted)


def _check_listenable(host: str, port: int) -> None:
    """Refuse an address the API cannot listen on before anything is migrated or started."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(infos[0][4])
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise InvalidInput(f"Cannot listen on {host}:{port}: {reason}.") from None


@app.command("serve")
def serve_command(
    workers: Annotated[int, typer.Option("--workers", help="Also run N `tickwarden worker` processes.")] = 0,
    no_loops: Annotated[bool, typer.Option("--no-loops", help="Run no background loops (API and workers only).")] = False,
    no_api: Annotated[bool, typer.Option("--no-api", help="Do not serve the HTTP API and dashboard.")] = False,
    host: Annotated[str, typer.Option("--host", help="Address the API listens on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port the API listens on.")] = 8080,
    replica: Annotated[str | None, typer.Option("--replica-id", help="This replica's identity in heartbeats.")] = None,
    public_url: Annotated[
        str, typer.Option("--public-url", help="The dashboard's public address, linked from notifications.")
    ] = "",
) -> None:
    """Run one control-plane replica: migrate, then the loops, N workers and the API until SIGTERM."""
    from tickwarden.db import Database, describe_url
    from tickwarden.logs import default_level as default_log_level
    from tickwarden.loops import replica_id as new_replica_id
    from tickwarden.migrate import upgrade
    from tickwarden.service import Service, ServiceOptions, build_loops
    from tickwarden.watchdog import heartbeat_url

    if workers < 0:
        raise InvalidInput("--workers must be zero or more.")
    if not 1 <= port <= 65535:
        print("tickwarden: --port must be between 1 and 65535.", file=sys.stderr)
        sys.exit(2)  # a usage error; typer.Exit's code is dropped outside standalone mode
    if not no_api:
        _check_listenable(host, port)
    if not no_loops:
        heartbeat_url()  # a malformed TICKWARDEN_HEARTBEAT_URL stops here, before anything starts
    default_log_level(logging.INFO)
    clock = WallClock()
    replica = replica or new_replica_id("serve")
    db = Database(min_size=1, max_size=10, application_name="tickwarden-serve")
    try:
        with db.connection() as conn:
            applied = upgrade(conn, clock.now())
        for migration in applied:
            log.info("applied migration %04d_%s", migration.version, migration.name)
        loops = [] if no_loops else build_loops(db, replica, ServiceOptions(dashboard_url=public_url.rstrip("/")))
        service = Service(db, loops, clock, replica)
        supervisor = WorkerSupervisor(workers)
        with_api = not no_api and api_available()
        log.info("replica %s on %s: loops [%s], %d worker(s)%s", replica, describe_url(db.url),
                 ", ".join(loop.name for loop in loops) or "none", workers,
                 f", API on http://{host}:{port}" if with_api else "")
        service.start()
        supervisor.start()

        def stop(signum: int, frame: object) -> None:
            service.stop(timeout=0)

        # Ours are the handlers uvicorn restores and then re-raises the signal into: with the
        # default handler in their place, SIGTERM would kill the process before the `finally`
        # below stops the workers, leaving them running on a stale environment.
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            if with_api:
                import uvicorn

                server = uvicorn.Server(uvicorn.Config(build_api(db, clock, replica), host=host, port=port,
                                                       log_level="warning"))
                server.run()
            else:
                service.wait()
        finally:
            log.info("replica %s stopping", replica)
            service.stop()
            supervisor.stop()
    finally:
        db.close()
