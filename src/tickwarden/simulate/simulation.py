"""Read-outs of a simulation's schema: runs, attempts, alerts and delivered notifications."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.pq import PipelineStatus

from tickwarden.pipeline import pipeline
from tickwarden.store.arrays import BigintArray, TimestamptzArray
from tickwarden.store.base import StoreBase, text_of
from tickwarden.store.queries import queries


class SimulationRepository(StoreBase):
    def runs(self) -> list[dict[str, Any]]:
        names, rows = self._binary_rows("simulation_runs")
        return [dict(zip(names, row, strict=True)) for row in rows]

    def attempts(self, runs: Sequence[Mapping[str, Any]]) -> Callable[[], list[dict[str, Any]]]:
        """Read every attempt now; the returned maker gives them as rows, ordered by coalesce(finished_at, queued_at), id.

        Each row carries its run's names, tick and manual flag, from `runs` (every run of
        the ledger, as `runs` read them): the attempts are read alone, in no order, and
        made into rows only when the maker is called (a month's noise score reads none).
        """
        _, rows = self._binary_rows("simulation_attempts")
        return lambda: attempt_rows(rows, runs)

    def alerts(self) -> list[dict[str, Any]]:
        return self._rows("simulation_alerts")

    def alert_events(self) -> list[dict[str, Any]]:
        return self._rows("simulation_alert_events")

    def notifications(self) -> list[dict[str, Any]]:
        return self._rows("simulation_notifications")

    def _binary_rows(self, name: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run query `name` and return its column names and its rows as tuples, read in binary.

        For the read-out's whole-ledger queries: a timestamp in binary is eight bytes the
        client converts at once, where its text has to be parsed, and a tuple a row costs
        less than the dictionary `_rows` makes.
        """
        with self.conn.cursor(binary=True) as cur:
            cur.execute(queries()[name])
            rows = cur.fetchall()
            return [column.name for column in cur.description or ()], rows

    def run_in_progress(self, workflow_id: int) -> int | None:
        row = self._row("simulation_run_in_progress", {"workflow_id": workflow_id})
        return row["id"] if row else None

    def submit_open_alert_workflows(self) -> Callable[[], set[int]]:
        """Send the read of which workflows have an open alert now; the returned reader gives its answer."""
        read = self._submit_text(queries()["simulation_open_alert_workflows"], None, tuples=True)  # one column
        return lambda: {workflow_id for workflow_id, in read()}

    def worker_writes(self, writes: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Apply the simulated worker's buffered writes (`simulation_renew_leases`, `finish_attempts`) in order.

        Each is a query's name or its completed text (`text_of`), with its parameters.
        The statements are the worker's own, with the parameters and times they had when
        they happened, and nobody reads their results. On a connection already in
        pipeline mode (the simulator's `DedicatedDatabase`, inside one of its
        transactions) they only join the pipeline: they go out, at no round trip of their
        own, with the next statement whose result is read. Otherwise call it on an
        autocommit store: they go out in one pipeline, which the server runs as one
        implicit transaction up to its sync (all or nothing), in one round trip.
        """
        if not writes:
            return
        if self.conn.pgconn.pipeline_status != PipelineStatus.OFF:
            for name, params in writes:
                self._send_text(text_of(name), params)
            return
        assert self.conn.autocommit, "pipelined writes are atomic only outside an explicit transaction"
        with pipeline(self.conn):
            for name, params in writes:
                self._send_text(text_of(name), params)

    def analyze(self) -> None:
        """Refresh the planner's statistics of this schema's tables once the catalog is loaded.

        A simulation's tables start empty; without this the planner keeps the plans of
        empty tables until autovacuum comes round, which a short run never sees.
        """
        self.analyze_tables([row["tablename"] for row in self._rows("simulation_tables")])

    def vacuum(self, tables: Sequence[str] | None = None) -> dict[str, float]:
        """Vacuum this schema's written tables, as autovacuum would have by now; return each one's rows as it counted them.

        Only the tables the loops write that a row ever reached (`simulation_tables_written`;
        `tables`: as `submit_tables_written` read them): the catalog and an empty table were
        analyzed once loaded (`analyze`) and are never written after, so a pass over one now
        would change nothing, yet cost a transaction of its own. VACUUM without ANALYZE: the
        caller analyzes only the tables whose rows moved enough (`analyze_tables`,
        `SimulatedAutovacuum`), from the counts returned here, each table's `reltuples` as
        this VACUUM just set it (its live rows; read in the same session right after, not from
        the asynchronous statistics collector). VACUUM cannot run inside a transaction or a
        pipeline: call it on `Database.maintenance`. Returns table -> rows, for every table it
        visited.
        """
        if tables is None:
            tables = self.submit_tables_written()()
        if not tables:
            return {}
        self.conn.execute(sql.SQL("VACUUM {}").format(sql.SQL(", ").join(map(sql.Identifier, tables))))
        rows = self._rows("simulation_table_rows", {"tables": list(tables)})
        return {row["tablename"]: float(row["reltuples"]) for row in rows}

    def analyze_tables(self, tables: Sequence[str]) -> None:
        """Refresh the planner's statistics of `tables` (none: nothing sent)."""
        if tables:
            self.conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(", ").join(map(sql.Identifier, tables))))

    def submit_tables_written(self) -> Callable[[], list[str]]:
        """Send the look for the tables `vacuum` visits now; the returned reader gives them.

        On the kept pipeline the look goes out with the sync that leaves pipeline mode for
        the VACUUM, instead of waiting on its own once outside it. A table's pages are what
        the statements sent before it left them, committed or not, so it lists the tables
        the look made after that sync would.
        """
        read = self._submit("simulation_tables_written")
        return lambda: [row["tablename"] for row in read()]

    def next_due(self, loop: str, now: datetime, kinds: Sequence[str]) -> tuple[datetime | None, datetime | None]:
        """When loop `loop` could next find work in the ledger as it stands (a lower bound; None: never).

        The second value is the instant the loop's idle pass returns as its next wake-up
        at the latest: the ticker's earliest fire time, the notifier's earliest claimable
        delivery (None for the other loops, which return `now + interval`).
        """
        return self.submit_next_due(loop, now, kinds)()

    def submit_next_due(
        self, loop: str, now: datetime, kinds: Sequence[str]
    ) -> Callable[[], tuple[datetime | None, datetime | None]]:
        """Send `next_due`'s look now; the returned reader gives its answer.

        On the pipelined connection the look goes out with the next statement anybody
        reads, so a reader called after that costs no round trip.
        """
        read = self._submit(f"simulation_next_due_{loop.replace('-', '_')}", {"now": now, "kinds": list(kinds)})

        def answer() -> tuple[datetime | None, datetime | None]:
            [row] = read()
            if loop == "notifier":
                present = [v for v in (row["due"], row["stale"]) if v is not None]
                return (min(present) if present else None), row["due"]
            return row["due"], (row["due"] if loop == "ticker" else None)

        return answer

    def history(self) -> list[dict[str, Any]]:
        return self._rows("simulation_history")

    def create_channel(self, tenant_id: int | None, name: str, audience: str, now: datetime, kind: str = "recording") -> int:
        return self.send_create_channel(tenant_id, name, audience, now, kind)()

    def send_create_channel(self, tenant_id: int | None, name: str, audience: str, now: datetime,
                            kind: str = "recording") -> Callable[[], int]:
        """Send the insert of a channel of the simulation now; the reader of its id (see `StoreBase._submit_text`)."""
        read = self._submit(
            "simulation_create_channel", {"tenant_id": tenant_id, "name": name, "kind": kind, "audience": audience, "now": now}
        )
        return lambda: int(read()[0]["id"])


def renew_params(renewals: Mapping[int, datetime], worker_id: str, lease_seconds: float) -> dict[str, Any]:
    """Parameters of `simulation_renew_leases`: each attempt with the time of its newest heartbeat."""
    return {
        "attempt_ids": BigintArray(renewals),
        "renewed_ats": TimestamptzArray(renewals.values()),
        "worker_id": worker_id,
        "lease_seconds": lease_seconds,
    }


def attempt_rows(rows: list[tuple[Any, ...]], runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`simulation_attempts`' rows as the read-out gives them: with their run's columns, in timeline order."""
    by_id = {run["id"]: run for run in runs}
    # (id, run_id, number, status, queued_at, started_at, finished_at, error, error_category)
    rows.sort(key=lambda a: (a[6] if a[6] is not None else a[4], a[0]))
    made = []
    for _, run_id, number, status, queued_at, started_at, finished_at, error, category in rows:
        run = by_id[run_id]
        made.append({"tenant": run["tenant"], "workflow": run["workflow"], "run_id": run_id, "number": number,
                     "status": status, "queued_at": queued_at, "started_at": started_at,
                     "finished_at": finished_at, "error": error, "error_category": category,
                     "scheduled_for": run["scheduled_for"], "manual": run["manual"]})
    return made
