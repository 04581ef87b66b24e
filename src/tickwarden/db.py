"""Connections: which PostgreSQL, the embedded server, the pool and schema selection.

`TICKWARDEN_DATABASE_URL` selects a server. When it is unset, tickwarden starts an
embedded PostgreSQL (pgserver) in a per-user data directory and reuses it across
commands. A `Database` may be bound to one schema (the simulator and the tests
run on a fresh schema each; `TICKWARDEN_SCHEMA` selects one for a whole process),
and every connection it hands out uses that schema.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import functools
import logging
import os
import re
import select
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import Transaction, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ConnStatus, TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from tickwarden.errors import DatabaseUnavailable, InvalidInput
from tickwarden.pipeline import pipeline

if TYPE_CHECKING:
    from datetime import datetime

    from tickwarden.migrate import Migration
    from tickwarden.store import Store

T = TypeVar("T")

log = logging.getLogger(__name__)

URL_ENV = "TICKWARDEN_DATABASE_URL"
SCHEMA_ENV = "TICKWARDEN_SCHEMA"
DATA_DIR_ENV = "TICKWARDEN_DATA_DIR"
EMBEDDED_DBNAME = "tickwarden"
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
READY_MARKER = "tickwarden-ready"
# While the database is known to be down, a borrower waits this long for a connection
# instead of the pool's full timeout: callers answer "unavailable" at once, and the
# first borrower to get a connection again ends the outage for everyone.
OUTAGE_TIMEOUT = 0.5


def data_dir() -> Path:
    """Return tickwarden's per-user data directory."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "tickwarden"


def database_url() -> str:
    """Return the configured database URL, starting the embedded server if none is set."""
    url = os.environ.get(URL_ENV, "").strip()
    if url:
        return url
    return embedded_url()


def embedded_url(directory: Path | None = None) -> str:
    """Start (or reuse) the embedded PostgreSQL and return a URL to its tickwarden database.

    1. Take an exclusive file lock, so concurrent commands initialise once.
    2. A data directory without the ready marker is a leftover of an interrupted
       initialisation: remove it and start over.
    3. Start the server (pgserver reuses one already running on the directory).
    4. Create the tickwarden database if missing, then write the ready marker.
    """
    root = directory or data_dir()
    root.mkdir(parents=True, exist_ok=True)
    pgdata = root / "pgdata"
    marker = root / READY_MARKER
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists() and pgdata.exists():
            log.warning("removing a half-initialised embedded database at %s", pgdata)
            _stop_stray_server(pgdata)
            shutil.rmtree(pgdata, ignore_errors=True)
        try:
            with warnings.catch_warnings():
                # platformdirs warns when XDG_RUNTIME_DIR is unset; pgserver copes with the fallback
                warnings.simplefilter("ignore")
                import pgserver  # deferred: starting it is slow and rarely needed

                # cleanup_mode=None keeps the server running for the next command.
                server = pgserver.get_server(pgdata, cleanup_mode=None)
            base = server.get_uri()
            with psycopg.connect(base, autocommit=True) as conn:
                exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (EMBEDDED_DBNAME,)).fetchone()
                if not exists:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(EMBEDDED_DBNAME)))
        except Exception as exc:
            if not marker.exists():
                _stop_stray_server(pgdata)
                shutil.rmtree(pgdata, ignore_errors=True)
            raise DatabaseUnavailable(
                f"Could not start the embedded PostgreSQL in {pgdata}: {type(exc).__name__}."
            ) from exc
        marker.write_text("1\n")
        return server.get_uri(EMBEDDED_DBNAME)


def _stop_stray_server(pgdata: Path) -> None:
    pidfile = pgdata / "postmaster.pid"
    if not pidfile.exists():
        return
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 15)
    except (OSError, ValueError, IndexError):
        pass


def describe_url(url: str) -> str:
    """Return where a URL points, without user or password."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "the configured database"
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    dbname = parts.get("dbname") or "(default database)"
    return f"{host}:{port}/{dbname}" if not str(host).startswith("/") else f"{host}/{dbname}"


def validate_schema_name(schema: str) -> str:
    if not SCHEMA_NAME.match(schema):
        raise InvalidInput(f"Schema name {schema!r} is not valid: use lowercase letters, digits and underscores.")
    return schema


class Database:
    """A pool of connections to one database, optionally bound to one schema."""

    # Whether a result may be read after the borrow that sent its statement has ended, at no
    # round trip of its own once a later borrow has read something (DedicatedDatabase: its
    # kept pipeline carries what was sent with the next read). Never on a pool: a borrow's
    # cursors are not to be touched once its connection is back in the pool.
    late_reads = False

    def __init__(
        self,
        url: str | None = None,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 10.0,
        application_name: str = "tickwarden",
        configure: Callable[[psycopg.Connection], None] | None = None,
        generic_plans: bool = False,
    ):
        self._configure(url, schema, application_name)
        if generic_plans:
            # A pool that serves a worker's loops alone (`tickwarden worker`): every statement
            # psycopg prepares on its connections runs the plan made once per connection. The
            # worker's exchange needs that at every attempt (`execution_generic_plans`, which
            # such a connection then skips: one statement fewer per exchange); its other
            # statements name their keys or months as parameters or constants, and are as
            # cheap either way. The control plane's pools keep the server's default.
            from tickwarden.store.execution import GENERIC_PLANS

            self._kwargs["options"] = f"{self._kwargs['options']} -c {GENERIC_PLANS}"
        self.timeout = timeout
        self.configure = configure  # called on each new connection (a benchmark counts round trips with it)
        self._held = threading.local()
        self.pool = ConnectionPool(
            self.url,
            min_size=min_size,
            max_size=max_size,
            kwargs=self._kwargs,
            timeout=timeout,
            open=False,  # opened below, once its idle connections are lent hottest first
            name=application_name,
            configure=configure,
            # A pooled connection the server dropped (a restart, a failover) is replaced
            # when it is lent, instead of failing the borrower's first statement.
            check=check_lent,
            # A transaction block opened inside a pipelined transaction is a savepoint.
            connection_class=PipelinedConnection,
        )
        _lend_hottest_first(self.pool)
        self.pool.open()

    def _configure(self, url: str | None, schema: str | None, application_name: str) -> None:
        """Settle the URL, the schema and the connection options; check the server answers."""
        self.url = url or database_url()
        schema = schema or os.environ.get(SCHEMA_ENV) or None
        self.schema = validate_schema_name(schema) if schema else None
        self._kwargs: dict[str, object] = {"application_name": application_name, "options": self._options()}
        self._outage_lock = threading.Lock()
        self.outage_since: float | None = None  # monotonic time the current outage was noticed
        self._check_reachable()

    def _options(self) -> str:
        """Return the server options of every connection: the URL's own, plus ours.

        Connections start in the platform's row-security context (`tickwarden.platform`
        on) because background loops work across tenants; an API request narrows its
        own transaction to one tenant with `SET LOCAL`. A schema, when given, leads
        the search path. JIT compilation is off: the server compiles a statement whose
        estimated cost passes `jit_above_cost`, which the loops' batch statements over a
        partitioned ledger do on misestimates alone, and compiling then takes longer
        (~0.1 s) than the statement runs; none of tickwarden's statements runs long enough
        to win it back. The session's time zone is UTC, the one every time of tickwarden is
        kept and shown in, whatever the server's default: psycopg then builds each
        timestamptz it reads with `datetime.timezone.utc`, a third of the cost of a zone it
        must look up (the server's `Etc/UTC`, as initdb often sets it, is such a zone).
        """
        try:
            existing = str(conninfo_to_dict(self.url).get("options") or "")
        except psycopg.ProgrammingError:
            raise InvalidInput("TICKWARDEN_DATABASE_URL is not a valid PostgreSQL URL.") from None
        parts = [existing] if existing else []
        parts.append("-c tickwarden.platform=on")
        parts.append("-c jit=off")
        parts.append("-c TimeZone=UTC")
        if self.schema:
            parts.append(f"-c search_path={self.schema}")
        return " ".join(parts)

    def _check_reachable(self) -> None:
        try:
            with psycopg.connect(self.url, connect_timeout=5, **self._kwargs) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            reason = _first_line(str(exc)) or type(exc).__name__
            raise DatabaseUnavailable(f"Cannot connect to the database at {describe_url(self.url)}: {reason}") from None

    def connect(self, **overrides: object) -> psycopg.Connection:
        """Open a dedicated connection outside the pool (for LISTEN or long locks)."""
        return psycopg.connect(self.url, **{**self._kwargs, **overrides})

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        """Lend a pooled connection; commit on success, roll back on error.

        A connection that cannot be had, or that breaks while lent, is raised as
        `DatabaseUnavailable`: callers see one error type for "the database is away".
        `timeout` bounds the wait for a connection (default: the pool's, or
        `OUTAGE_TIMEOUT` during a known outage).
        """
        held: psycopg.Connection | None = getattr(self._held, "conn", None)  # see `hold`
        if held is not None:
            if not held.closed:
                yield from self._lend_held(held)
                return
            self._held.conn = None  # broken while held: the rest of the hold borrows from the pool
        if timeout is None:
            timeout = OUTAGE_TIMEOUT if self.outage_since is not None else self.timeout
        try:
            with self.pool.connection(timeout=timeout) as conn:
                self._outage_over()
                try:
                    yield conn
                except psycopg.OperationalError as exc:
                    if not conn.broken:
                        raise  # a cancelled statement or a lock timeout: the server is fine
                    self._outage_begun()
                    raise DatabaseUnavailable(
                        f"The connection to the database at {describe_url(self.url)} was lost.") from exc
        except PoolTimeout:
            # Every connection busy, or none to be had? Only the rare timeout pays for the look.
            if self.outage_since is not None or not self._answers():
                self._outage_begun()
                raise DatabaseUnavailable(f"The database at {describe_url(self.url)} cannot be reached.") from None
            raise DatabaseUnavailable(f"No database connection became free at {describe_url(self.url)}.") from None

    def _lend_held(self, conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
        """Lend the connection this thread holds (see `hold`) as the pool lends one.

        Commit on success, roll back on error, and a broken connection raised as
        `DatabaseUnavailable`, exactly as `connection` does with a pooled one.
        """
        try:
            yield conn
        except psycopg.OperationalError as exc:
            if not conn.broken:
                _rollback(conn)
                raise
            self._held.conn = None
            self._outage_begun()
            raise DatabaseUnavailable(f"The connection to the database at {describe_url(self.url)} was lost.") from exc
        except BaseException:
            _rollback(conn)
            raise
        # libpq's status itself: `conn.info` is a new `ConnectionInfo` at every read (every attempt's exchange).
        if not conn.closed and conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.commit()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Keep one pooled connection for this thread until the block ends: every borrow inside reuses it.

        For a caller that makes several short borrows in a row on one thread (the worker's
        lease, its environment marks and its outcome): the pool's check-out, its check of the
        lent connection (`check_lent`) and its return are paid once for the lot. Other threads (the
        heartbeat) still borrow from the pool. A held connection that breaks is dropped,
        and the borrows after it inside the block come from the pool again. Nested holds
        keep the outer one.
        """
        if getattr(self._held, "conn", None) is not None:
            yield
            return
        with self.connection() as conn:
            self._held.conn = conn
            try:
                yield
            finally:
                self._held.conn = None

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.url, connect_timeout=2, **self._kwargs) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def _outage_begun(self) -> None:
        """Note an outage; only its first sign is logged, so a long one is one line, not one per pass."""
        with self._outage_lock:
            if self.outage_since is not None:
                return
            self.outage_since = time.monotonic()
        log.error("the database at %s cannot be reached; waiting for it to come back", describe_url(self.url))

    def _outage_over(self) -> None:
        if self.outage_since is None:
            return
        with self._outage_lock:
            since, self.outage_since = self.outage_since, None
        if since is not None:
            log.warning("the database at %s is reachable again after %.0f s", describe_url(self.url),
                        time.monotonic() - since)

    @contextlib.contextmanager
    def transaction(self, timeout: float | None = None, *, pipelined: bool = False) -> Iterator[Store]:
        """Run one transaction and hand out the store bound to it.

        `pipelined` keeps the connection in pipeline mode for the whole transaction, for a
        caller whose every round trip counts (the ticker, whose idle pass is one read): BEGIN
        is sent as a statement and goes out with the first statement that is read, and COMMIT
        with the sync that ends the pipeline, so neither is a round trip of its own. A read
        waits for its result (a flush), so what the transaction reads is what it would read
        otherwise; a statement whose result nobody reads is not waited for, and its error
        surfaces at the next read or at the commit. After an error the server skips the rest
        of the pipeline, and the transaction is rolled back. Not for COPY.
        """
        from tickwarden.store import Store

        with self.connection(timeout) as conn:
            if not pipelined:
                with conn.transaction():
                    yield Store(conn)
                return
            conn.autocommit = True  # BEGIN and COMMIT are explicit statements in the pipeline
            try:
                with _pipelined_transaction(conn):
                    yield Store(conn)
            finally:
                if not conn.closed:  # a broken connection is discarded by the pool
                    conn.autocommit = False

    def retrying(self, work: Callable[[Store], T], *, attempts: int = 3, pause: float = 0.2) -> T:
        """Run `work(store)` in one transaction, again if the server chose it as a deadlock's victim.

        For a caller outside the loops (the self-test, an operator's command) whose writes
        meet the live loops' locks in another order: the victim's transaction is rolled
        back whole, so running `work` again is safe as long as `work` keeps its effects in
        the transaction (it may be run more than once; only the committed run counts).
        """
        for attempt in range(attempts):
            try:
                with self.transaction() as store:
                    return work(store)
            except psycopg.OperationalError as exc:
                if not rolled_back(exc) or attempt == attempts - 1:
                    raise
                time.sleep(pause * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    @contextlib.contextmanager
    def probe(self) -> Iterator[Store]:
        """Hand out a store whose statements each commit on their own, for a read-only look.

        A loop checks with one such statement whether its pass has anything to do
        before it opens a transaction: an idle pass then costs one round trip instead
        of a BEGIN, its statements and a COMMIT. Never for writes that must go together.
        """
        from tickwarden.store import Store

        with self.connection() as conn:
            conn.autocommit = True
            try:
                yield Store(conn)
            finally:
                if not conn.closed:  # a broken connection is discarded by the pool
                    conn.autocommit = False

    @contextlib.contextmanager
    def maintenance(self) -> Iterator[Store]:
        """Lend a store on which every statement commits on its own, outside any transaction (VACUUM)."""
        with self.probe() as store:
            yield store

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[Store]:
        """Lend a store on which every statement commits on its own.

        For operations that are one statement each (a status mark, an environment's
        instance row): a statement is atomic by itself, and skipping BEGIN/COMMIT saves two
        round trips. Here, with `transaction` and `probe`, so the store package never needs
        the database module.
        """
        from tickwarden.store import Store

        with self.connection() as conn:
            conn.autocommit = True
            try:
                yield Store(conn)
            finally:
                conn.autocommit = False

    def migrate(self, now: datetime) -> list[Migration]:
        """Apply pending migrations (a no-op when the schema is current); return those applied."""
        from tickwarden.migrate import upgrade

        with self.connection() as conn:
            return upgrade(conn, now)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


BEGIN, COMMIT, ROLLBACK = sql.SQL("BEGIN"), sql.SQL("COMMIT"), sql.SQL("ROLLBACK")  # see DedicatedDatabase.transaction
CHAIN = sql.SQL("COMMIT AND CHAIN")  # see DedicatedDatabase._pipelined


def _command(conn: psycopg.Connection, statement: sql.SQL | sql.Composed) -> None:
    """Send BEGIN, COMMIT or ROLLBACK (or a savepoint's) as psycopg sends its own transaction commands.

    In pipeline mode the command only joins the pipeline's queue, with no cursor, no
    placeholders to convert and no write of its own: it goes out with the next statement
    executed or the next sync, ahead of it, and a read of an earlier statement's result
    leaves it queued. Its error is raised where the result arrives, as any pipelined
    statement's (psycopg's own check of a command's result: its error, or `PipelineAborted`
    when an earlier error made the server skip it). Outside pipeline mode it runs at once
    and raises its error there. Nearly a third of a simulated day's statements are these:
    queued here directly, with the text encoded once per connection (`_encoded`), rather
    than through psycopg's generator, which composes and encodes the text every time.
    """
    pipeline = conn._pipeline
    if pipeline is None or not _QUEUES_COMMANDS:
        conn.wait(conn._exec_command(statement))
        return
    conn._check_connection_ok()
    pgconn = conn.pgconn
    pipeline.command_queue.append(functools.partial(pgconn.send_query_params, _encoded(conn, statement), None))
    pipeline.result_queue.append(None)


def _queues_commands() -> bool:
    """Whether this psycopg's pipeline and connection have the members `_command` queues a command with."""
    from psycopg._pipeline_base import BasePipeline

    annotated = getattr(BasePipeline, "__annotations__", {})
    return ("command_queue" in annotated and "result_queue" in annotated
            and hasattr(psycopg.Connection, "_check_connection_ok") and hasattr(BasePipeline, "_process_results"))


_QUEUES_COMMANDS = _queues_commands()
_ENCODED = "_tickwarden_commands"  # the connection's attribute: id of a command -> (the command, encoding, bytes)


def _encoded(conn: psycopg.Connection, statement: sql.SQL | sql.Composed) -> bytes:
    """`statement` as the bytes psycopg would send on `conn`, encoded once per connection and client encoding.

    Keyed by the object's id, the object kept beside its bytes so that the id cannot be
    another's: the commands are module constants and `_savepoint_statements`' few.
    """
    cache: dict[int, tuple[object, str, bytes]] | None = conn.__dict__.get(_ENCODED)
    if cache is None:
        cache = conn.__dict__[_ENCODED] = {}
    encoding = conn.pgconn._encoding
    entry = cache.get(id(statement))
    if entry is not None and entry[0] is statement and entry[1] == encoding:
        return entry[2]
    if len(cache) >= 256:
        cache.clear()
    encoded = statement.as_bytes(conn)
    cache[id(statement)] = (statement, encoding, encoded)
    return encoded


class PipelinedConnection(psycopg.Connection[Any]):
    """The dedicated connection: a transaction block opened inside a pipelined transaction is a savepoint.

    libpq learns that the pipeline's BEGIN opened a transaction only at a sync; until
    then psycopg would take a nested `transaction()` for an outer one (BEGIN … COMMIT,
    committing the enclosing transaction early) instead of SAVEPOINT … RELEASE. Inside the
    transaction `DedicatedDatabase` opened (`in_block`), the block is a savepoint by
    construction: SAVEPOINT and RELEASE join the pipeline and go out with the next read,
    and only an error pays a sync (the server skips everything after an error until one,
    so ROLLBACK TO must follow it). Elsewhere in pipeline mode the pipeline is synced first,
    and psycopg's own block syncs again when it is entered and left.
    """

    in_block = False  # inside DedicatedDatabase's pipelined BEGIN … COMMIT
    _savepoints = 0  # how many of this connection's savepoints are open: names them apart when nested

    @contextlib.contextmanager
    def transaction(self, savepoint_name: str | None = None, force_rollback: bool = False) -> Iterator[Transaction]:
        if self._pipeline is not None and self.in_block:
            with self._savepoint(savepoint_name, force_rollback) as tx:
                yield tx
            return
        if self._pipeline is not None:
            self._pipeline.sync()
        with super().transaction(savepoint_name, force_rollback) as tx:
            yield tx

    @contextlib.contextmanager
    def _savepoint(self, savepoint_name: str | None, force_rollback: bool) -> Iterator[Transaction]:
        """SAVEPOINT … RELEASE as plain pipelined statements, with psycopg's block semantics.

        The block yields a `Transaction` naming the savepoint, as psycopg's would; it is
        never entered (entering it would ask libpq for the transaction status, which the
        pipeline has not synced). An exception rolls back to the savepoint, after the sync
        that clears the server's aborted state; `psycopg.Rollback` aimed at this block (or
        at none) is swallowed there, as psycopg does, and `force_rollback` rolls back a
        block that ended well.

        A savepoint is named by its depth, so the poller's evaluation, one savepoint a pass, sends
        the same three texts every time, composed once (`_savepoint_statements`): a name of its
        own each time made psycopg compose every one anew.
        ROLLBACK TO and RELEASE take the newest savepoint of a name, which is the block's own.
        """
        assert self._pipeline is not None
        self._savepoints += 1
        try:
            name = savepoint_name or f"tickwarden_savepoint_{self._savepoints}"
            begin, release, roll_back = _savepoint_statements(name)
            tx = Transaction(self, name, force_rollback)
            _command(self, begin)
            try:
                yield tx
            except BaseException as exc:
                with contextlib.suppress(psycopg.Error):  # the error itself is on its way up already
                    self._pipeline.sync()
                _command(self, roll_back)
                _command(self, release)
                if isinstance(exc, psycopg.Rollback) and exc.transaction in (None, tx):
                    return
                raise
            if force_rollback:
                _command(self, roll_back)
            _command(self, release)
        finally:
            self._savepoints -= 1


@functools.lru_cache(maxsize=64)
def _savepoint_statements(name: str) -> tuple[sql.Composed, sql.Composed, sql.Composed]:
    """SAVEPOINT, RELEASE and ROLLBACK TO of savepoint `name`, composed once per name."""
    ident = sql.Identifier(name)
    return (sql.SQL("SAVEPOINT {}").format(ident), sql.SQL("RELEASE SAVEPOINT {}").format(ident),
            sql.SQL("ROLLBACK TO SAVEPOINT {}").format(ident))


class _Pipelined:
    """`DedicatedDatabase._pipelined`'s borrow: one transaction of the kept pipeline, rolled back on an error.

    A class rather than a generator's context manager: a simulated day makes some 8,700 of
    these borrows, and the generator's costs four calls and two resumptions each. What each
    step does on an error is the generator's: an error before the store is handed out ends the
    borrow there (its pipeline synced, and rolled back once BEGIN may have gone), an error in
    the body or in its COMMIT AND CHAIN rolls it back and is raised; the connection is given
    back (`_lent`) whatever happens.
    """

    __slots__ = ("db", "conn")

    def __init__(self, db: DedicatedDatabase):
        self.db = db

    def __enter__(self) -> Store:
        db = self.db
        conn = self.conn = db._lend()
        try:
            db._keep_pipeline(conn)
            try:
                if not db._chained:
                    _command(conn, BEGIN)
                db._chained = False  # until this transaction's own end opens the next
                db._ahead_writes = False  # this transaction takes them
                conn.in_block = True
                try:
                    return db._store(conn)
                except BaseException:
                    conn.in_block = False
                    raise
            except BaseException as exc:
                db._roll_back(conn, exc)
                raise
        except BaseException:
            db._lent = False
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        db, conn = self.db, self.conn
        try:
            conn.in_block = False
            if exc_type is None:
                try:
                    _command(conn, CHAIN)
                except BaseException as error:
                    db._roll_back(conn, error)
                    raise
                db._chained = True
            else:
                db._roll_back(conn, exc if exc is not None else exc_type())
        finally:
            db._lent = False


class _AheadBorrow:
    """`DedicatedDatabase.ahead`'s borrow of the connection, in the kept pipeline, given back whatever happens.

    A class for the reason `_Pipelined` is one: some 2,600 borrows a simulated day, each two
    generators' context managers deep (`_borrow`'s and its own).
    """

    __slots__ = ("db",)

    def __init__(self, db: DedicatedDatabase):
        self.db = db

    def __enter__(self) -> psycopg.Connection:
        db = self.db
        conn = db._lend()
        try:
            db._keep_pipeline(conn)
        except BaseException:
            db._lent = False
            raise
        db._ahead_writes = True
        return conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.db._lent = False


class DedicatedDatabase(Database):
    """One connection instead of a pool, kept in pipeline mode, for a single-threaded caller (the simulator).

    The simulator runs every loop's pass one after the other, tens of thousands of
    them per virtual day; the pool's check-out and return bookkeeping is a sizeable
    part of a pass that is one short statement, and so is every round trip that carries
    no answer anybody waits for. So the connection stays in pipeline mode from one
    borrow to the next: every borrow (`transaction`, `autocommit`) is one transaction,
    BEGIN … COMMIT AND CHAIN (the chain opens the next, which sends no BEGIN: see
    `_pipelined`), sent as statements on an autocommit connection (a read-only `probe`
    and writes sent `ahead` have none of their own: they join the next one), and a
    round trip is made only where a result is read (a flush: everything sent before it
    goes with it) or a savepoint is rolled back (a sync: see PipelinedConnection). A
    COMMIT, and a write whose result nobody reads (the simulated worker's), goes out
    with the next statement that is read. Each borrow sees what the borrows before it
    wrote (one session, in order); a statement's error is raised at the first read
    after it, and the borrow open then is rolled back.

    The connection is lent to one borrower at a time: a nested borrow is a programming
    error, not a second connection, and says so. `connection` and `maintenance` leave
    pipeline mode first (a sync, which also settles every pending commit); a connection
    lent by `connection` and returned inside a transaction is rolled back, as the pool does.
    """

    late_reads = True  # see Database: one connection, one borrower at a time, one kept pipeline

    def __init__(self, url: str | None = None, *, schema: str | None = None, application_name: str = "tickwarden"):
        self._configure(url, schema, application_name)
        self._conn = self._open()
        self._pipeline: contextlib.ExitStack | None = None  # the pipeline kept open across borrows
        self._ahead_writes = False  # something was sent `ahead` that no BEGIN has taken yet
        # The last transaction ended with COMMIT AND CHAIN: the next one is open already (see `_pipelined`).
        self._chained = False
        self._lent = False
        self._stores: tuple[psycopg.Connection, Store] | None = None  # see `_store`

    def connect(self, **overrides: object) -> psycopg.Connection:
        return PipelinedConnection.connect(self.url, **{**self._kwargs, **overrides})

    def _open(self) -> psycopg.Connection:
        return self.connect(autocommit=True)

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[psycopg.Connection]:
        conn = self._lend()
        try:
            yield conn
        finally:
            self._lent = False

    def _lend(self) -> psycopg.Connection:
        """Mark the connection lent, opened anew when it was closed; the borrower sets `_lent` back."""
        if self._lent:
            raise RuntimeError("the dedicated connection is already lent: nested use needs a pooled Database")
        if self._conn.closed:
            self._conn, self._pipeline, self._ahead_writes, self._chained = self._open(), None, False, False
        self._lent = True
        return self._conn

    def _leave_pipeline(self, exc: BaseException | None = None) -> None:
        """Sync the kept pipeline and leave pipeline mode: every result, and every error, is in."""
        stack, self._pipeline = self._pipeline, None
        self._ahead_writes = False  # the sync commits them, or an error's rollback undoes them
        chained, self._chained = self._chained, False
        if chained and exc is None and stack is not None and not self._conn.closed:
            _command(self._conn, COMMIT)  # the open transaction (writes sent ahead, probes) ends here
        if stack is not None and not self._conn.closed:
            if exc is None:
                stack.close()
            else:
                stack.__exit__(type(exc), exc, exc.__traceback__)  # logs, never raises, a second error

    def _pipelined(self) -> _Pipelined:
        """Lend the store bound to the connection in the kept pipeline for one transaction; on an error, roll it back.

        A transaction ends with COMMIT AND CHAIN, which commits it and opens the next, so
        the next transaction sends no BEGIN: one statement fewer per transaction, about a
        fifth of a simulated day's. What runs between two transactions (a probe, writes sent
        ahead) runs in the open one, as it ran in the pipeline's implicit transaction that the
        next BEGIN made its own: committed with the next transaction, rolled back with it. The
        open transaction has no transaction id until a statement writes (between borrows no
        row lock is held), and the snapshot the server may keep until the pipeline syncs is
        the one the implicit transaction kept too; leaving the pipeline (`connection`,
        `maintenance`, `close`) commits it first, so VACUUM runs outside any transaction.
        """
        return _Pipelined(self)

    def _roll_back(self, conn: psycopg.Connection, exc: BaseException) -> None:
        """After an error in a borrow: the pipeline, which discards what follows until its sync, synced; then a rollback."""
        self._leave_pipeline(exc)
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            _command(conn, ROLLBACK)

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        """Lend the connection outside pipeline mode, not in autocommit; roll back whatever the borrower left open."""
        with self._borrow() as conn:
            self._leave_pipeline()
            conn.autocommit = False
            try:
                yield conn
            finally:
                if not conn.closed:
                    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                        conn.rollback()
                    conn.autocommit = True

    def transaction(  # type: ignore[override]  # `_pipelined` itself (a class's context manager, not a generator's)
        self, timeout: float | None = None, *, pipelined: bool = True
    ) -> contextlib.AbstractContextManager[Store]:
        """Run one transaction in the kept pipeline and hand out the store bound to it (always pipelined).

        The same statements, in the same order, with the same results as `Database.transaction`,
        in fewer round trips: BEGIN, SAVEPOINT, RELEASE and COMMIT go out with the statement
        after them. A statement whose result is read waits for it (a flush, not a sync: the
        pipeline goes on), so what a pass reads is what it would have read.
        """
        return _Pipelined(self)  # `_pipelined`, one call fewer

    @contextlib.contextmanager
    def probe(self) -> Iterator[Store]:
        """A read-only look, with no BEGIN and COMMIT of its own unless writes sent `ahead` wait for one.

        As `Database.probe`, whose statements each commit on their own: a read changes
        nothing, so it may run in the pipeline's implicit transaction and whichever
        transaction comes next makes it its own. Writes sent ahead are another matter:
        they must commit with the borrow that follows them (see `ahead`), so a probe that
        follows them is a transaction, BEGIN … COMMIT. On an error the pipeline is synced
        and whatever it left open rolled back, as a transaction's error is.
        """
        if self._ahead_writes:
            with self._pipelined() as store:
                yield store
            return
        with self._borrow() as conn:
            self._keep_pipeline(conn)
            try:
                yield self._store(conn)
            except BaseException as exc:
                self._leave_pipeline(exc)
                if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    _command(conn, ROLLBACK)
                raise

    def autocommit(self) -> contextlib.AbstractContextManager[Store]:  # type: ignore[override]  # as `transaction`
        """One-statement operations, as one transaction of the kept pipeline (see the class)."""
        return _Pipelined(self)  # `_pipelined`, one call fewer

    def ahead(self) -> _AheadBorrow:
        """Lend the kept pipeline for writes sent ahead of the next borrow, inside its transaction.

        No BEGIN or COMMIT of their own: the server runs what is sent in the implicit
        transaction of the pipeline, and the next borrow's BEGIN makes that transaction its
        own (PostgreSQL turns an implicit transaction block into the explicit one), so the
        writes commit or roll back with it, and leaving pipeline mode (a sync) commits them
        when no borrow comes first. A `probe` that comes next is then a transaction: the
        writes never wait past the next borrow. For the simulated worker's writes, sent just
        before the pass that must see them: that pass's first borrow either commits or fails
        the run.
        """
        return _AheadBorrow(self)

    def _store(self, conn: psycopg.Connection) -> Store:
        """The store bound to `conn`, built once per connection: its repositories hold nothing but the connection."""
        from tickwarden.store import Store

        if self._stores is None or self._stores[0] is not conn:
            self._stores = (conn, Store(conn))
        return self._stores[1]

    def _keep_pipeline(self, conn: psycopg.Connection) -> None:
        """Enter pipeline mode unless the connection is in the kept pipeline already.

        In the kept pipeline psycopg prepares each statement at its first execution, not its
        sixth. With its default threshold (5) each statement's first five executions were sent
        unnamed: the server parsed, analysed, rewrote and planned each afresh and threw the plan
        away, some 130 plans of the hot statements a simulated day of 1,000 workflows (0.3 to 1 ms
        each: CTEs over the ledger). Prepared at once, a statement is planned when first bound and
        its plan kept (a generic one under the simulator's `plan_cache_mode`) until a `VACUUM
        (ANALYZE)` invalidates it, as before. In a pipeline the statement's Parse goes out with its
        execution, no round trip of its own; outside (`maintenance`, `connection`) psycopg waits
        for a Parse before it executes, so there the default threshold is back, and a VACUUM's
        one-off text is sent as one statement as before. A simulated day names fewer than 60
        statements, well inside psycopg's `prepared_max` (100): nothing is evicted. Plans decide
        how rows are found, never which (see `Simulation._session_url`).
        """
        if self._pipeline is None:
            stack = contextlib.ExitStack()
            stack.callback(setattr, conn, "prepare_threshold", conn.prepare_threshold)  # runs after the pipeline's exit
            stack.enter_context(pipeline(conn))
            conn.prepare_threshold = 0
            self._pipeline = stack

    @contextlib.contextmanager
    def maintenance(self) -> Iterator[Store]:
        """Lend a store outside pipeline mode and any transaction, for VACUUM."""
        with self._borrow() as conn:
            self._leave_pipeline()
            yield self._store(conn)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """One connection already: nothing to hold."""
        yield

    def close(self) -> None:
        if not self._conn.closed:
            self._leave_pipeline()  # the last commits land
        self._conn.close()


class _HottestFirst(collections.deque):  # type: ignore[type-arg]
    """A pool's idle connections, the one given back last lent first (psycopg_pool lends the oldest).

    psycopg_pool keeps its idle connections in a deque, gives one back at its right end and
    lends from its left (`popleft`): every borrow took the connection idle longest, so a worker's
    attempts went round every connection of its pool, one after the other, each with its own server
    process. Lent from the right, the connection given back last is lent again: a worker's
    thread (one borrow per attempt, `Database.hold`) keeps meeting the same few server processes,
    whose caches are warm, and the others stay idle. The pool's shrinking (`popleft` too) then
    closes the idle connection given back last rather than the oldest: either is one the pool did
    not need.
    """

    def popleft(self) -> Any:
        return self.pop()


def _lend_hottest_first(pool: ConnectionPool[Any]) -> None:
    """Have `pool` (not opened yet, so none of its threads adds a connection meanwhile) lend the
    connection given back last first (`_HottestFirst`); a psycopg_pool that keeps its idle
    connections otherwise is left as it is."""
    idle = getattr(pool, "_pool", None)
    if type(idle) is collections.deque and not idle:
        pool._pool = _HottestFirst()


def check_lent(conn: psycopg.Connection) -> None:
    """Check a connection the pool is about to lend, without a round trip while it is sound.

    A connection resting in the pool has nothing to read: every result of its last borrow
    was read before it came back, and LISTEN runs on dedicated connections (`connect`), never
    on pooled ones. A server that ends the session (a restart, a failover, `pg_terminate_backend`)
    sends a FATAL error and closes the socket, and a backend that died leaves the socket at end
    of file: either makes the socket readable. So a look at the socket (poll, no wait) stands
    for the check while nothing is there, and only a readable socket, or a connection libpq
    already knows bad or not idle, pays for the full check (an empty query): it raises on a
    dead connection, which the pool then replaces, and reads whatever harmless message came
    unasked (a notice, a parameter's new value). A look cannot see a peer gone without closing
    (a host powered off): the borrower's first statement fails then, as it does when a
    connection dies between a check and that statement.
    """
    pgconn = conn.pgconn
    if pgconn.status == ConnStatus.OK and pgconn.transaction_status == TransactionStatus.IDLE:
        look = select.poll()
        look.register(pgconn.socket, select.POLLIN)
        if not look.poll(0):
            return
    ConnectionPool.check_connection(conn)


@contextlib.contextmanager
def _pipelined_transaction(conn: psycopg.Connection) -> Iterator[None]:
    """Run the block as one transaction, BEGIN … COMMIT, in pipeline mode on `conn` (in autocommit)."""
    try:
        with pipeline(conn):
            _command(conn, BEGIN)
            if isinstance(conn, PipelinedConnection):
                conn.in_block = True  # a savepoint inside joins the pipeline (see PipelinedConnection)
            try:
                yield
            finally:
                if isinstance(conn, PipelinedConnection):
                    conn.in_block = False
            _command(conn, COMMIT)
    except BaseException:
        # Leaving the pipeline (a sync) ended the server's skipping after an error; whatever
        # is still open is rolled back. A connection too broken for that is the pool's to drop.
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                _command(conn, ROLLBACK)
        raise


def rolled_back(exc: BaseException) -> bool:
    """Whether the server rolled the transaction back to break a deadlock or keep it serializable (SQLSTATE 40xxx)."""
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith("40")


def _rollback(conn: psycopg.Connection) -> None:
    if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.rollback()


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line.rstrip(".") + "."
    return ""
