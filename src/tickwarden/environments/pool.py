"""A worker's warm environments: wake on demand, reuse while warm, stop when idle.

Instance states, as recorded in `environment_instances`:

    starting ──► busy ◄──► warm ──► stopped   (idle timeout, evicted, or the worker shut down)
       │           │          │
       └───────────┴──────────┴──► dead      (failed to start, died, or the watchdog killed it)

Processes are keyed by (tenant, environment): a process serves one tenant only,
and the key, the runner's own check and `acquire`'s assertion all enforce it.

A process that stays busy from one attempt to the next (the next one uses it too) keeps
its row as it is: its `runs_served` and `last_used_at` are written with its next mark
(warm, stopped, dead), or at the first outcome `BUSY_MARK_SECONDS` after the last write,
so a row lags the process by that much at most while it stays busy.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from tickwarden.db import Database
from tickwarden.environments import MAX_LIVE, sandbox
from tickwarden.environments.process import EnvironmentFailed, EnvironmentProcess
from tickwarden.errors import TickwardenError
from tickwarden.models import Environment

if TYPE_CHECKING:
    from tickwarden.environments.pod_control import PodEnvironments, RemoteEnvironment

log = logging.getLogger(__name__)

# How long a process kept busy from one attempt to the next may go without its row being written:
# its runs served and last use are then written with the next mark that is written anyway (warm,
# stopped, dead), or at the first outcome past this. Well inside the reaper's grace (300 s past the
# idle timeout), so a row lagging by this never looks abandoned to it.
BUSY_MARK_SECONDS = 60.0


class IsolationError(Exception):
    """An environment was asked to serve a tenant it does not belong to."""


@dataclass
class Instance:
    """A live process of one environment, owned by one worker."""

    row_id: int
    tenant_id: int
    environment: Environment
    process: EnvironmentProcess | RemoteEnvironment
    last_used_at: datetime
    runs_served: int = 0
    remote: bool = False  # a pod of the cluster (runtime kubernetes), not a process of this worker
    marked: str = "busy"  # the status its row was last given (or is being given, in the caller's exchange)
    # When its row was last written, and the runs served since, not written yet.
    marked_at: datetime | None = None
    unwritten: int = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid


class EnvironmentPool:
    """The environment processes of one worker."""

    def __init__(self, db: Database, worker_id: str, *, max_live: int = MAX_LIVE,
                 spawn: Callable[..., EnvironmentProcess] = EnvironmentProcess,
                 pods: PodEnvironments | Callable[[], PodEnvironments] | None = None):
        self.db = db
        self.worker_id = worker_id
        self.max_live = max_live
        self._spawn = spawn
        self._live: dict[tuple[int, int], Instance] = {}
        # Environments with runtime kubernetes: built on first need (configured the standard way).
        self._pods = pods

    def pods(self) -> PodEnvironments:
        """The pod side of the pool, configured on first use; EnvironmentFailed when it cannot be."""
        from tickwarden.environments.pod_control import PodEnvironments, from_environ

        if isinstance(self._pods, PodEnvironments):
            return self._pods
        try:
            self._pods = self._pods() if self._pods is not None else from_environ(self.db)
        except TickwardenError as exc:
            raise EnvironmentFailed(f"environments on Kubernetes are not available to this worker: {exc}") from None
        return self._pods

    def live(self) -> list[Instance]:
        return list(self._live.values())

    def acquire(self, environment: Environment, tenant_id: int, now: datetime) -> tuple[Instance, bool]:
        """Return a warm process for the environment, marked busy, and whether it had to be woken.

        1. Refuse an environment of another tenant (isolation is never best effort).
        2. Reuse the warm process if it is alive and its settings did not change;
           otherwise record the old one dead or stopped and wake a new one.
        """
        if environment.tenant_id != tenant_id:
            raise IsolationError(f"environment {environment.id} belongs to tenant {environment.tenant_id}, not {tenant_id}")
        if environment.runtime == "kubernetes":
            # Never cached here: whether the pod is awake is shared state, read under its row lock.
            remote = self.pods().wake(environment, now)
            return Instance(0, tenant_id, environment, remote, now, remote=True), remote.woke
        key = (tenant_id, environment.id)
        current = self._live.get(key)
        if current is not None:
            assert current.process.tenant_id == tenant_id, "a warm process must serve one tenant only"
            if not current.process.alive():
                self._retire(current, "dead", now)
                current = None
            elif current.environment.updated_at != environment.updated_at:
                self._retire(current, "stopped", now)
                current = None
        if current is not None:
            if current.marked != "busy":  # else kept busy by the previous outcome, for this attempt
                self._mark(current, "busy", now)
            return current, False
        return self._wake(environment, tenant_id, now), True

    def _wake(self, environment: Environment, tenant_id: int, now: datetime) -> Instance:
        """Start a process: recorded `starting` first, so a slow or failed wake is visible.

        At `max_live` processes, the least recently used one is stopped first: a worker
        serving many tenants keeps a bounded number warm, not one per tenant ever seen.
        """
        while len(self._live) >= self.max_live:
            oldest = min(self._live.values(), key=lambda i: i.last_used_at)
            self._retire(oldest, "stopped", now)
        settings = environment.settings if isinstance(environment.settings, dict) else {}
        # Steps import from the worker's code directory (as before) and the configured paths;
        # the process itself runs elsewhere, in its own directory.
        paths = [os.getcwd(), *(settings.get("paths") or [])]
        try:
            box = sandbox.prepare(environment, settings.get("env"))
        except (sandbox.SandboxError, OSError) as exc:
            raise EnvironmentFailed(f"the environment's sandbox could not be prepared: {exc}") from None
        with self.db.transaction() as store:
            row = store.execution.start_environment_instance(
                tenant_id=tenant_id, environment_id=environment.id, worker_id=self.worker_id,
                pid=None, status="starting", now=now,
            )
        try:
            process = self._spawn(tenant_id, environment.python, paths=paths, env=box.env, cwd=box.cwd,
                                  uid=box.uid, gid=box.gid)
        except EnvironmentFailed:
            with self.db.transaction() as store:
                store.execution.update_environment_instance(row.id, "dead", now)
            raise
        with self.db.transaction() as store:
            store.execution.update_environment_instance(row.id, "busy", now, pid=process.pid)
        instance = Instance(row.id, tenant_id, environment, process, now, marked_at=now)
        self._live[(tenant_id, environment.id)] = instance
        log.info("woke environment %s of tenant %s in %.0f ms (pid %s)",
                 environment.name, tenant_id, process.cold_start_ms, process.pid)
        return instance

    def release(self, instance: Instance, now: datetime) -> None:
        """Return a process to the warm pool after a run, or record it dead if it died."""
        instance.last_used_at = now
        if instance.remote:
            self.pods().touch(instance.environment, now)
            return
        if not instance.process.alive():
            self._retire(instance, "dead", now)
            return
        instance.runs_served += 1
        self._mark(instance, "warm", now, served=1)

    def released(self, instance: Instance | None, now: datetime, *,
                 next_environment: Environment | None = None) -> tuple[int, str, int] | None:
        """As `release`, but return the mark (row id, status, runs served) for the caller's outcome to write.

        `instance`: the process that served the attempt, if any. `next_environment`: the one the
        worker starts next, already leased: a process that will serve it is kept `busy` (the
        next `acquire` then writes nothing) instead of going to `warm` and back. With no
        instance, a process kept busy for this attempt (which did not reach it) goes to `warm`.
        None when nothing is left to write: a pod's use is recorded here.
        """
        if instance is None:
            kept = next((i for i in self._live.values() if i.marked == "busy"), None)
            if kept is None or self.serves(kept, next_environment):
                return None
            kept.marked = "warm"
            return kept.row_id, "warm", self._served(kept, now)
        if instance.remote:
            self.release(instance, now)
            return None
        # Not looked at here: it has just answered the attempt's last step. Should it die after that,
        # the next pass finds it dead, by `stop_idle` or by the `acquire` that would hand it out.
        instance.last_used_at = now
        instance.runs_served += 1
        keep = self.serves(instance, next_environment)
        if keep and busy_row_stands(instance.marked, instance.marked_at, now):
            # busy → busy: its status stands; the count and last use wait for the next mark written
            instance.unwritten += 1
            return None
        instance.marked = "busy" if keep else "warm"
        return instance.row_id, instance.marked, self._served(instance, now) + 1

    def lease_mark(self, instance: Instance, mark: tuple[int, str, int], status: str | None, stands: bool,
                   written: tuple[str, datetime | None], now: datetime) -> None:
        """Record the mark the lease's statement wrote for a process `released` with no next environment known.

        `mark` is what `released` returned then (warm, with the runs served since its row was
        last written), `written` its row's status and when it was written before that, `stands`
        whether that row, busy and recent, may stay as it is. `status` is what the server
        wrote (busy or warm), or None when it wrote nothing: kept busy on a row that stands, as
        `released` keeps it (the runs served wait for the next mark written), or a row retired
        meanwhile (stopped or dead), which no later mark changes. The process's state is set,
        not added to, so a mark recorded again (the exchange retried after an outage) leaves it
        as one would.
        """
        if status is None and stands:
            instance.marked, instance.unwritten, instance.marked_at = "busy", mark[2], written[1]
            return
        instance.marked, instance.unwritten, instance.marked_at = status or "warm", 0, now

    def settle(self, instance: Instance, next_environment: Environment | None, now: datetime) -> None:
        """Mark `instance` warm if it was kept busy for an attempt it will not serve (`next_environment`'s, if any).

        The mark written with an outcome keeps a process busy for the attempt expected next;
        when another one comes next instead (its lease was lost, or its workflow moved to
        another environment), the process is idle and must not stay marked busy.
        """
        if instance.marked == "busy" and not self.serves(instance, next_environment) and not instance.remote:
            self._mark(instance, "warm", now)

    @staticmethod
    def serves(instance: Instance, environment: Environment | None) -> bool:
        """Whether `acquire` would hand this live process to an attempt of `environment` as it is."""
        return (environment is not None and not instance.remote and environment.id == instance.environment.id
                and environment.tenant_id == instance.tenant_id
                and environment.updated_at == instance.environment.updated_at)

    def discard(self, instance: Instance, now: datetime, status: str = "dead") -> None:
        """Kill a process (the watchdog fired, or it broke) and forget it."""
        if instance.remote:  # the pod's server stopped its process group itself; the use still counts
            self.pods().touch(instance.environment, now)
            return
        self._retire(instance, status, now)

    def stop_idle(self, now: datetime) -> list[Instance]:
        """Stop every process idle for longer than its environment's idle timeout; return them.

        Every process found dead is recorded dead, but one kept busy for the attempt coming next
        (and not idle past its timeout) is not looked at: that attempt's `acquire`, moments later,
        looks at it before handing it out (a dead one is retired and a new one woken there), so a
        warm attempt waits on one liveness check (one `wait4`), not two. One kept busy for an
        attempt that never comes to it is looked at once marked warm (`settle`, `released`), or
        once idle past its timeout, as every process is.
        """
        stopped = []
        for instance in list(self._live.values()):
            idle = instance.last_used_at + timedelta(seconds=instance.environment.idle_timeout_seconds) <= now
            if (idle or instance.marked != "busy") and not instance.process.alive():
                self._retire(instance, "dead", now)
            elif idle:
                self._retire(instance, "stopped", now)
                stopped.append(instance)
        return stopped

    def close(self, now: datetime) -> None:
        """Stop every process (the worker is shutting down)."""
        for instance in list(self._live.values()):
            self._retire(instance, "stopped", now)

    def _retire(self, instance: Instance, status: str, now: datetime) -> None:
        key = (instance.tenant_id, instance.environment.id)
        if self._live.get(key) is instance:
            del self._live[key]
        if status == "stopped":
            instance.process.stop()
        else:
            instance.process.kill()
        self._mark(instance, status, now)

    def _mark(self, instance: Instance, status: str, now: datetime, served: int = 0) -> None:
        instance.marked = status
        served += self._served(instance, now)
        with self.db.autocommit() as own:
            own.execution.update_environment_instance(instance.row_id, status, now, served=served, relaxed=True)

    @staticmethod
    def _served(instance: Instance, now: datetime) -> int:
        """The runs served not yet written, for the mark being written now (they are counted as written)."""
        unwritten, instance.unwritten, instance.marked_at = instance.unwritten, 0, now
        return unwritten


def busy_row_stands(status: str, written_at: datetime | None, now: datetime) -> bool:
    """Whether a process's row, marked `status` at `written_at`, may stay as it is while the process stays busy."""
    return status == "busy" and written_at is not None and now - written_at < timedelta(seconds=BUSY_MARK_SECONDS)


__all__ = ["EnvironmentFailed", "EnvironmentPool", "Instance", "IsolationError"]
