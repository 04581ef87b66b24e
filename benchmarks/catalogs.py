"""Upkeep of the system catalogs of a server that runs without autovacuum.

The test suite and the benchmarks create and drop schemas by the hundred (every
simulation migrates a scratch schema of its own). Each table, column, index, policy and
grant is a catalog row that a drop leaves dead, and with autovacuum off, as on some
development servers, nothing reclaims them: catalogs grow to hundreds of megabytes, and
every migration, `GRANT … ON ALL TABLES IN SCHEMA` and planner lookup pays for it (a
fresh schema's migrations took 6.4 s on such a server, and 0.5 s once its catalogs were
compacted). Only the catalogs are touched, and only where autovacuum is off: on a server
where it runs, this does nothing.
"""

from __future__ import annotations

import logging
import threading

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

# The catalogs that creating and dropping schemas of tables churns.
CHURNED = ("pg_class", "pg_attribute", "pg_depend", "pg_type", "pg_index", "pg_constraint", "pg_statistic",
           "pg_trigger", "pg_policy", "pg_attrdef", "pg_inherits", "pg_sequence", "pg_rewrite", "pg_proc",
           "pg_description", "pg_shdepend")
LOCK_TIMEOUT = "2s"  # a compaction that would wait behind running DDL longer is skipped, never queued
BLOATED_BYTES = 8 << 20  # compacted only past this size: the suite's catalogs fit in a few megabytes


def tidy(url: str, *, full: bool = False) -> list[str]:
    """Vacuum the churned catalogs when the server's autovacuum is off; return those vacuumed.

    `full` compacts those past BLOATED_BYTES (rewrites their files, briefly locking out
    catalog readers; each gives up after LOCK_TIMEOUT rather than wait) and plainly
    vacuums the others, but only while no other client is connected to the database:
    a compaction rebuilding a catalog's indexes waits for any transaction that is
    creating tables in it, while holding the lock that transaction needs next, and the
    server then breaks the deadlock by failing one of the two. With company (another
    test run, a benchmark, a service), every catalog gets the plain vacuum instead.
    A plain vacuum only makes dead rows' space reusable and runs beside anything.
    """
    done: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SHOW autovacuum").fetchone() != ("off",):
            return done
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
        sizes = dict(conn.execute("SELECT relname::text, pg_relation_size(oid) FROM pg_class"
                                  " WHERE relnamespace = 'pg_catalog'::regnamespace AND relname = ANY(%s)",
                                  (list(CHURNED),)).fetchall())
        for name in CHURNED:
            compact = full and sizes.get(name, 0) > BLOATED_BYTES and alone(conn)
            statement = sql.SQL("VACUUM (FULL) pg_catalog.{}") if compact else sql.SQL("VACUUM pg_catalog.{}")
            try:
                conn.execute(statement.format(sql.Identifier(name)))
            except (psycopg.errors.LockNotAvailable, psycopg.errors.InsufficientPrivilege):
                continue
            done.append(name)
    return done


def alone(conn: psycopg.Connection) -> bool:
    """Whether `conn` is the only client session connected to its database just now.

    Checked right before each compaction; a client that connects during one waits for
    its lock at most as long as the compaction of one catalog takes.
    """
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    ).fetchone()
    return row is not None and row[0] == 0


class Upkeep:
    """A plain vacuum of the churned catalogs every `interval` seconds, in a daemon thread, until stopped."""

    def __init__(self, url: str, interval: float = 60.0):
        self.url = url
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="catalog-upkeep", daemon=True)

    def start(self) -> Upkeep:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                tidy(self.url)
            except psycopg.Error as exc:  # upkeep is best effort: the next round tries again
                log.warning("catalog upkeep failed: %s", type(exc).__name__)
