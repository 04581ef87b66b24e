"""Where a simulated day goes: round trips, statements and time per loop and per named query.

    python -m benchmarks.simulate_profile [--workflows 1000] [--hours 24] [--seed 7] [--top 40] [--json]

The same fleet as `benchmarks.simulate`. Counted in the client, at the psycopg layer
(the server has no pg_stat_statements here): a statement executed outside pipeline mode
is one round trip, and so is each flush or sync of a pipeline (where the client waits
for the server). Every count is deterministic for a seed; times are wall-clock seconds
measured around each loop's events and each named query (execute and read), and move
with the machine's load. A diagnostic, not a benchmark figure: it hooks psycopg's
pipeline internals, and its hooks cost time of their own.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import logging
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import _pipeline_base

from benchmarks.common import BENCH_URL, Figure
from benchmarks.noise import START, build
from tickwarden import db
from tickwarden.clock import isoformat_z
from tickwarden.simulate import engine, parse_scenario, run_policy
from tickwarden.simulate.report import to_json
from tickwarden.store import base
from tickwarden.store.monitoring import advance_text
from tickwarden.store.queries import queries


PLACEHOLDERS = ("{unnest}", "{unnest_numbered}", "{months}", "{limit}", "{retry_launch}")


def _completed_pattern(text: str) -> re.Pattern[str]:
    """A pattern of `text` with each placeholder standing for whatever completed it."""
    parts = re.split("(" + "|".join(re.escape(p) for p in PLACEHOLDERS) + ")", text)
    return re.compile("".join(".*?" if part in PLACEHOLDERS else re.escape(part) for part in parts), re.DOTALL)


class Profile:
    """Counts per loop (the event being processed) and per (loop, query name)."""

    def __init__(self) -> None:
        self.loop = "set-up"
        self.round_trips: collections.Counter[str] = collections.Counter()
        self.statements: collections.Counter[str] = collections.Counter()
        self.events: collections.Counter[str] = collections.Counter()
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.queries: collections.Counter[tuple[str, str]] = collections.Counter()
        self.query_seconds: collections.defaultdict[tuple[str, str], float] = collections.defaultdict(float)
        self._names = {text: name for name, text in queries().items()}
        # a named statement cut by its caller (a part that would do nothing left out), named after it
        self._names[advance_text()] = "monitoring_record_missed_and_advance (advance only)"
        # A statement completed at run time (one of `PLACEHOLDERS` in its text) is named by its whole
        # text, each placeholder matching what completed it: two statements may share the text before
        # their first one (`monitoring_open_alerts` and `monitoring_record_failures` both start `WITH wanted AS`).
        self._completed = [(_completed_pattern(text), name) for name, text in queries().items()
                           if any(p in text for p in PLACEHOLDERS)]
        self._since: float | None = None

    def name(self, query: Any) -> str:
        text = query if isinstance(query, str) else str(getattr(query, "_obj", query))
        found = self._names.get(text)
        if found:
            return found
        for pattern, name in self._completed:
            if pattern.fullmatch(text):
                self._names[text] = name
                return name
        return text.strip().splitlines()[0][:40] if text.strip() else "?"

    def switch(self, loop: str) -> None:
        now = time.perf_counter()
        if self._since is not None:
            self.seconds[self.loop] += now - self._since
        self.loop, self._since = loop, now
        self.events[loop] += 1

    def install(self) -> None:
        """Hook psycopg and the engine (for the life of the process)."""
        profile = self
        execute = psycopg.Cursor.execute

        inside_run = [False]  # a statement `base._run` counted: its `execute`, if any, is not another

        def counted_execute(cur: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            if not inside_run[0]:
                count(cur, query)
            return execute(cur, query, params, **kwargs)

        def count(cur: Any, query: Any) -> None:
            profile.statements[profile.loop] += 1
            profile.queries[(profile.loop, profile.name(query))] += 1
            if cur.connection.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF:
                profile.round_trips[profile.loop] += 1

        psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
        run = base._run

        def counted_run(cur: Any, text: str, params: Any) -> None:
            # The store's statements: in pipeline mode most are sent without psycopg's `execute`.
            count(cur, text)
            inside_run[0] = True
            try:
                run(cur, text, params)
            finally:
                inside_run[0] = False

        base._run = counted_run
        command = db._command

        def counted_command(conn: Any, statement: Any) -> None:  # BEGIN, COMMIT, a savepoint's: no cursor
            profile.statements[profile.loop] += 1
            profile.queries[(profile.loop, profile.name(statement))] += 1
            if conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF:
                profile.round_trips[profile.loop] += 1
            command(conn, statement)

        db._command = counted_command

        sync, fetch = _pipeline_base.BasePipeline._sync_gen, _pipeline_base.BasePipeline._fetch_gen

        def counted_sync(pipeline: Any) -> Iterator[Any]:
            profile.round_trips[profile.loop] += 1
            return (yield from sync(pipeline))

        def counted_fetch(pipeline: Any, *, flush: bool) -> Iterator[Any]:
            profile.round_trips[profile.loop] += flush
            return (yield from fetch(pipeline, flush=flush))

        _pipeline_base.BasePipeline._sync_gen = counted_sync  # type: ignore[method-assign]
        _pipeline_base.BasePipeline._fetch_gen = counted_fetch  # type: ignore[method-assign]

        fetch_rows = base.StoreBase._fetch

        def timed_fetch(store: Any, text: str, params: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fetch_rows(store, text, params)
            finally:
                profile.query_seconds[(profile.loop, profile.name(text))] += time.perf_counter() - t0

        base.StoreBase._fetch = timed_fetch  # type: ignore[method-assign]

        pop = engine.EventQueue.pop

        def attributed_pop(queue: Any) -> Any:
            event = pop(queue)
            if event is not None:
                loop = event.token[0] if event.token else ("worker" if event.order == engine.ORDER["worker"]
                                                           else "world")
                profile.switch(loop)
            return event

        engine.EventQueue.pop = attributed_pop  # type: ignore[method-assign]

        def attributed(method: Any, label: Any) -> Any:
            def wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
                saved = profile.loop
                profile.loop = label(*args) if callable(label) else label
                try:
                    return method(obj, *args, **kwargs)
                finally:
                    profile.loop = saved
            return wrapper

        engine.SimulationRepository.next_due = attributed(  # type: ignore[method-assign]
            engine.SimulationRepository.next_due, lambda loop, *rest: f"look: {loop}")
        engine.SimulationRepository.submit_next_due = attributed(  # type: ignore[method-assign]
            engine.SimulationRepository.submit_next_due, lambda loop, *rest: f"look: {loop}")
        engine.SimulatedWorker.flush = attributed(engine.SimulatedWorker.flush, "worker's writes")  # type: ignore[method-assign]
        collect = engine.Simulation._collect

        def attributed_collect(simulation: Any, *args: Any) -> Any:
            profile.switch("read-out")
            return collect(simulation, *args)

        engine.Simulation._collect = attributed_collect  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--top", type=int, default=40, help="named queries to list, by time")
    parser.add_argument("--json", action="store_true",
                        help="print the round trips per loop and in all as a JSON list on the last line")
    args = parser.parse_args()
    logging.getLogger("tickwarden").setLevel(logging.ERROR)

    raw, _, _ = build(args.workflows, max(1, (args.hours + 23) // 24), args.seed)
    raw["end"] = isoformat_z(START + timedelta(hours=args.hours))
    raw["manual_runs"] = [m for m in raw["manual_runs"] if m["at"] <= raw["end"]]
    scenario = parse_scenario(raw, source="simulate-profile")
    profile = Profile()
    profile.install()
    t0, cpu0 = time.perf_counter(), time.process_time()
    outcome = run_policy(scenario, "tickwarden", url=BENCH_URL)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    profile.switch("end")
    document = json.dumps(to_json(outcome), sort_keys=True, default=str).encode()
    print(f"{args.workflows:,} workflows x {args.hours} virtual hours: wall {wall:.1f} s, client CPU {cpu:.1f} s; "
          f"{len(outcome.runs):,} runs, {len(outcome.alerts):,} alerts, {len(outcome.notifications):,} messages; "
          f"document sha256 {hashlib.sha256(document).hexdigest()[:16]}")
    loops = sorted((set(profile.round_trips) | set(profile.events) | set(profile.statements)) - {"end"},
                   key=lambda n: -profile.round_trips[n])
    print(f"\n{'loop':24} {'events':>8} {'round trips':>12} {'statements':>11} {'seconds':>8}")
    for loop in loops:
        print(f"{loop:24} {profile.events[loop]:8,} {profile.round_trips[loop]:12,} {profile.statements[loop]:11,} "
              f"{profile.seconds.get(loop, 0.0):8.1f}")
    print(f"{'total':24} {'':8} {sum(profile.round_trips.values()):12,} {sum(profile.statements.values()):11,}")
    print(f"\n{'loop':24} {'query':48} {'count':>7} {'seconds':>8}")
    ranked = sorted(profile.queries, key=lambda key: -profile.query_seconds.get(key, 0.0))
    for loop, name in ranked[:args.top]:
        print(f"{loop:24} {name:48} {profile.queries[(loop, name)]:7,} "
              f"{profile.query_seconds.get((loop, name), 0.0):8.2f}")
    if args.json:  # counts, deterministic for a seed: no floor and no target of their own
        figures = [Figure(f"round trips: {loop}", profile.round_trips[loop], "round trips") for loop in loops]
        figures.append(Figure("round trips: total", sum(profile.round_trips.values()), "round trips"))
        print(json.dumps([f.as_json() for f in figures]), flush=True)


if __name__ == "__main__":
    main()
