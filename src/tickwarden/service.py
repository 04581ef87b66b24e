"""The service: run every background loop's passes on the wall clock, each in its own thread.

Each loop thread repeats:

1. `next = loop.run_once(now)`; a pass that raises is logged as one sanitized line
   and retried after a short back-off (the thread never dies of it);
2. record the pass in `loop_heartbeats` (replica, loop, when, how long, passes,
   the error of this pass, when the next one is due);
3. sleep until `next`, or until woken early.

Waking early is an optimisation only: `wake(loop)` from this process, or a
`NOTIFY tickwarden_wake, '<loop name>'` from any replica (an empty payload wakes
every loop) when the LISTEN connection is enabled. Polling is what makes the
loops correct; a lost notification only delays a pass until its own wake-up.
`stop()` (SIGTERM or SIGINT in `tickwarden serve`) lets each running pass finish.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from tickwarden.clock import Clock, WallClock
from tickwarden.db import Database
from tickwarden.errors import DatabaseUnavailable
from tickwarden.loops import Loop
from tickwarden.sanitize import sanitize_error

log = logging.getLogger(__name__)

WAKE_CHANNEL = "tickwarden_wake"
ERROR_BACKOFF = timedelta(seconds=5)
# A pass that returns a wake-up in the past must not spin: passes are at least this far apart.
MIN_GAP = timedelta(milliseconds=20)


@dataclass
class LoopState:
    loop: Loop
    wake: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    passes: int = 0
    errors: int = 0
    last_error: str | None = None


@dataclass(frozen=True)
class ServiceOptions:
    """What `build_loops` may be told by `tickwarden serve`."""

    ticker_batch: int = 20000
    dashboard_url: str = ""  # the public address notifications link alerts to
    extra: dict[str, Any] = field(default_factory=dict)


def build_loops(db: Database, replica_id: str, options: ServiceOptions | None = None) -> list[Loop]:
    """Return every loop one control-plane replica runs, in pipeline order.

    The ticker (the built-in trigger: it fires straight from the schedules table,
    so no reconciler runs beside it), the lease reaper, the outcome poller (retry
    engine and evaluator), the deadline detector, the escalation clock, the
    notifier, the retention sweeper and the watchdog (`tickwarden.watchdog`). Workers run beside them as their own
    processes (`serve --workers N`).
    """
    from tickwarden.deadlines import DeadlineDetector
    from tickwarden.alerts import EscalationClock
    from tickwarden.notifier import Notifier
    from tickwarden.poller import OutcomePoller
    from tickwarden.reaper import LeaseReaper
    from tickwarden.retention import RetentionSweeper
    from tickwarden.ticker import Ticker
    from tickwarden.triggers.kubernetes import trigger_mode

    options = options or ServiceOptions()
    if trigger_mode() == "kubernetes":  # CronJobs fire the ticks; the reconciler converges them
        from tickwarden.triggers.kubernetes_reconciler import KubernetesReconciler

        reconciler = KubernetesReconciler.from_environment(db)
        trigger: list[Loop] = [reconciler]
        if reconciler.settings.retries == "jobs":
            from tickwarden.triggers.kubernetes_retries import RetryJobLauncher

            trigger.append(RetryJobLauncher(db, reconciler.api.jobs(), reconciler.settings))
    else:
        trigger = [Ticker(db, batch=options.ticker_batch)]
    from tickwarden.environments.pod_control import pods_enabled

    if pods_enabled():  # environments with runtime kubernetes: converge their objects, stop idle ones
        from tickwarden.environments.pod_control import EnvironmentPodLoop, from_environ

        trigger.append(EnvironmentPodLoop(from_environ(db)))
    loops: list[Loop] = [
        *trigger,
        LeaseReaper(db, server_restarts=True),
        OutcomePoller(db, replica_id),
        DeadlineDetector(db),
        EscalationClock(db),
        Notifier(db, replica_id, dashboard_url=options.dashboard_url),
        RetentionSweeper(db),
    ]
    # The watchdog watches every loop above (on every replica) and alerts the platform's channels.
    from tickwarden.watchdog import Watchdog, heartbeat_url

    loops.append(Watchdog(db, replica_id, [loop.name for loop in loops], dashboard_url=options.dashboard_url,
                          ping_url=heartbeat_url()))
    return loops


class Service:
    """Runs loops in threads until stopped; records every pass; can be woken early."""

    def __init__(
        self,
        db: Database,
        loops: Sequence[Loop],
        clock: Clock | None = None,
        replica_id: str = "tickwarden",
        *,
        listen: bool = True,
    ):
        self.db = db
        self.clock = clock or WallClock()
        self.replica_id = replica_id
        self.states = {loop.name: LoopState(loop) for loop in loops}
        if len(self.states) != len(loops):
            raise ValueError("every loop of a service needs its own name")
        self.listen = listen
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        for state in self.states.values():
            state.thread = threading.Thread(target=self._run, args=(state,), name=f"loop-{state.loop.name}", daemon=True)
            state.thread.start()
        if self.listen and self.states:
            self._listener = threading.Thread(target=self._listen, name="loop-wake-listener", daemon=True)
            self._listener.start()

    def wake(self, name: str | None = None) -> None:
        """Run a loop's next pass now (every loop when `name` is None or unknown here)."""
        state = self.states.get(name or "")
        for target in [state] if state else self.states.values():
            target.wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the passes in progress; wait up to `timeout` seconds for the threads."""
        self._stop.set()
        for state in self.states.values():
            state.wake.set()
        deadline = time.monotonic() + timeout
        for state in self.states.values():
            if state.thread is not None:
                state.thread.join(max(0.0, deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.join(max(0.0, min(2.0, deadline - time.monotonic())))

    def wait(self) -> None:
        """Block until `stop()` is called."""
        while not self._stop.wait(1.0):
            pass

    def run_pass(self, state: LoopState) -> datetime:
        """Run one pass of one loop and record it; return when the next pass is due."""
        now = self.clock.now()
        started = time.perf_counter()
        error: str | None = None
        try:
            wanted = state.loop.run_once(now)
        except Exception as exc:  # a failing pass must not kill the loop
            error = sanitize_error(f"{type(exc).__name__}: {exc}")
            state.errors += 1
            if isinstance(exc, DatabaseUnavailable):
                log.debug("loop %s: pass failed: %s", state.loop.name, error)  # the outage is logged once, by db
            else:
                log.error("loop %s: pass failed: %s", state.loop.name, error)
            wanted = now + ERROR_BACKOFF
        duration_ms = (time.perf_counter() - started) * 1000
        state.passes += 1
        state.last_error = error
        due = max(wanted, now + MIN_GAP)
        try:
            with self.db.transaction() as store:
                store.heartbeat.record_heartbeat(self.replica_id, state.loop.name, now, duration_ms, error, due)
        except DatabaseUnavailable:
            pass  # the outage is logged once, by db
        except Exception as exc:  # the heartbeat is observability: never stop the loop for it
            log.warning("loop %s: heartbeat not recorded: %s", state.loop.name, sanitize_error(type(exc).__name__))
        return due

    def _run(self, state: LoopState) -> None:
        while not self._stop.is_set():
            due = self.run_pass(state)
            if self._stop.is_set():
                break
            self.clock.sleep_until(due, state.wake)
            state.wake.clear()

    def _listen(self) -> None:
        """Wake loops on NOTIFY; reconnect after errors, quietly: polling keeps everything correct."""
        while not self._stop.is_set():
            try:
                with self.db.connect(autocommit=True) as conn:
                    conn.execute(f"LISTEN {WAKE_CHANNEL}")
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self.wake(note.payload or None)
            except psycopg.Error as exc:
                log.debug("wake listener: %s", sanitize_error(type(exc).__name__))
                self._stop.wait(5.0)
