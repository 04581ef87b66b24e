"""`tickwarden worker` executes attempts; `tickwarden envs` shows the warm environments."""

from __future__ import annotations

import logging
import signal
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tickwarden.cli import app
from tickwarden.cli.output import console, print_json
from tickwarden.clock import WallClock, ensure_utc
from tickwarden.errors import UsageError
from tickwarden.environments import MAX_LIVE

if TYPE_CHECKING:
    from tickwarden.worker import Worker

log = logging.getLogger("tickwarden.worker")

ERROR_BACKOFF_SECONDS = 5
# Attempts each worker loop leases at once. A lease's statements (the queue's lock, the
# attempts' writes, their contexts) cost little more for eight attempts than for two, so a
# small batch pays them every other attempt: 4 loops at 2 each (8 split between them) spent
# 15-30% more server CPU per no-op attempt than at 8 each (a quiet server). Each loop's batch is not split
# with the concurrency: what a loop holds ahead waits at most PREFETCH_WAIT behind its
# running attempt before it goes back to the queue for an idle worker, whatever the batch,
# so a larger one does not hoard the queue from peers for longer. Leases held ahead through
# a database outage longer than the lease are not lost: the reaper puts them back in the
# queue unstarted, and the worker's start, a compare-and-set, then skips them.
DEFAULT_BATCH = 8
# Leases one loop may take at once: past this a worker hoards the queue from its peers
# (what it holds ahead goes back PREFETCH_WAIT after its lease, but a whole batch at a time).
MAX_BATCH = 100


def run_workers(workers: list[Worker], stop: threading.Event, clock: WallClock) -> None:
    """Drive each worker's passes on the wall clock in its own thread until `stop` is set."""

    def loop(worker: Worker) -> None:
        try:
            while not stop.is_set():
                try:
                    wake = worker.run_once(clock.now())
                except Exception:  # the database blinked or a bug: log it and keep serving
                    log.exception("worker %s: pass failed", worker.worker_id)
                    wake = clock.now() + timedelta(seconds=ERROR_BACKOFF_SECONDS)
                clock.sleep_until(wake, stop)
        finally:
            worker.close(clock.now())

    threads = [threading.Thread(target=loop, args=(w,), name=w.worker_id) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        # join in slices so the main thread keeps handling signals
        while thread.is_alive():
            thread.join(0.5)


@app.command("worker")
def worker_command(
    worker_id: Annotated[str | None, typer.Option("--id", help="Worker identity (default: host, pid and a nonce).")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Attempts executed at once.")] = 1,
    lease: Annotated[float, typer.Option("--lease", help="Lease length in seconds, renewed every third.")] = 30,
    grace: Annotated[float, typer.Option("--grace", help="Seconds a stopping worker lets the current attempt finish.")] = 30,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between looks at an empty queue.")] = 1.0,
    batch: Annotated[int, typer.Option("--batch", help="Attempts each of the --concurrency loops leases at once "
                                       f"(default: {DEFAULT_BATCH}).")] = 0,
    max_environments: Annotated[int, typer.Option("--max-environments",
                                                  help="Warm environment processes kept per worker.")] = MAX_LIVE,
    metrics_port: Annotated[int, typer.Option("--metrics-port",
                                              help="Serve this process's Prometheus metrics on this port (0: off).")] = 0,
    metrics_host: Annotated[str, typer.Option("--metrics-host", help="Address the metrics listen on.")] = "127.0.0.1",
) -> None:
    """Execute queued attempts until SIGTERM (then finish or release the current ones)."""
    from tickwarden.db import Database
    from tickwarden.environments import EnvironmentPool
    from tickwarden.logs import default_level as default_log_level
    from tickwarden.loops import replica_id
    from tickwarden.metrics import serve_process_metrics
    from tickwarden.worker import Worker

    if concurrency < 1 or lease < 1 or poll <= 0 or max_environments < 1 or not 0 <= batch <= MAX_BATCH:
        raise UsageError(f"--concurrency, --lease and --max-environments must be at least 1, --batch between 0 and "
                           f"{MAX_BATCH} and --poll positive.")
    batch = batch or DEFAULT_BATCH
    if not 0 <= metrics_port <= 65535:
        raise UsageError("--metrics-port must be a port number (1-65535), or 0 for none.")
    default_log_level(logging.INFO)
    base = worker_id or replica_id("worker")
    clock = WallClock()
    stop = threading.Event()
    # Its pool serves these loops alone: their exchanges' plans made once are the session's (one statement fewer each).
    with Database(max_size=2 * concurrency + 2, application_name="tickwarden-worker", generic_plans=True) as db:
        db.migrate(clock.now())
        ids = [base] if concurrency == 1 else [f"{base}/{i}" for i in range(concurrency)]
        workers = [
            Worker(db, wid, lease_seconds=lease, clock=clock, poll_seconds=poll, batch=batch,
                   environments=EnvironmentPool(db, wid, max_live=max_environments))
            for wid in ids
        ]

        def on_signal(signum: int, frame: object) -> None:
            if stop.is_set():  # a second signal: give up on running attempts now
                for w in workers:
                    w.abort.set()
                return
            log.info("stopping: finishing current attempts (at most %s s)", grace)
            stop.set()
            timer = threading.Timer(grace, lambda: [w.abort.set() for w in workers])
            timer.daemon = True
            timer.start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        if metrics_port:
            serve_process_metrics(metrics_port, metrics_host)
        log.info("worker %s started (concurrency %s, batch %s, lease %s s)", base, concurrency, batch, lease)
        run_workers(workers, stop, clock)


@app.command("envs")
def envs_command(
    as_json: Annotated[bool, typer.Option("--json")] = False,
    include_stopped: Annotated[bool, typer.Option("--all", help="Include stopped and dead instances.")] = False,
) -> None:
    """Show environment processes (which tenant, which worker, warm or busy, runs served) and environment pods."""
    from tickwarden.db import Database

    with Database(max_size=1) as db, db.transaction() as store:
        instances = store.execution.list_environment_instances(include_stopped=include_stopped)
        pods = store.api.list_environment_pods()
    rows: list[dict[str, Any]] = [
        {
            "tenant": i.tenant, "environment": i.environment, "runtime": "process", "status": i.status, "pid": i.pid,
            "worker": i.worker_id, "started_at": i.started_at, "last_used_at": i.last_used_at,
            "stopped_at": i.stopped_at, "runs_served": i.runs_served, "idle_timeout_seconds": i.idle_timeout_seconds,
        }
        for i in instances
    ]
    # A pod environment is one shared pod whatever the worker: awake (one replica) or asleep (zero).
    rows += [
        {
            "tenant": v.tenant_name, "environment": v.environment.name, "runtime": "kubernetes",
            "status": "awake" if v.pod_state.awake else "asleep", "pid": None, "worker": None,
            "started_at": v.pod_state.woken_at, "last_used_at": v.pod_state.last_used_at,
            "stopped_at": v.pod_state.stopped_at, "wakes": v.pod_state.wakes,
            "idle_timeout_seconds": v.environment.idle_timeout_seconds,
        }
        for v in pods
        if v.pod_state is not None and (include_stopped or v.pod_state.awake)
    ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no environment processes or pods" + ("" if include_stopped else " running (use --all for history)"))
        return
    from rich.table import Table

    table = Table("tenant", "environment", "runtime", "status", "pid", "worker", "last used", "runs / wakes")
    for r in rows:
        used = r["last_used_at"]
        table.add_row(r["tenant"], r["environment"], r["runtime"], r["status"], str(r["pid"] or "-"),
                      r["worker"] or "-", ensure_utc(used).strftime("%Y-%m-%d %H:%M:%SZ") if used else "-",
                      str(r["runs_served"] if r["runtime"] == "process" else f"{r['wakes']} wakes"))
    console.print(table)
