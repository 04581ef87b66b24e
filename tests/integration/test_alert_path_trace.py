"""The path of one failing tick to one Slack message, traced through the real loops.

Every loop of one replica (`service.build_loops`) and a real worker run on a virtual
clock against a local Slack stand-in. A loop runs when its pass is due or, as in the
service, as soon as a `tickwarden_wake` notification names it (only those sent by the
traced loops' own connections count: other tests share the server). The trace counts
what the path costs:

- passes: loop passes (the worker's included) from the tick's fire time to the Slack post;
- transactions: server transactions begun on the way (an explicit BEGIN, or a
  statement run outside one, which commits on its own), and the statements sent;
- shapes: the tickwarden dataclasses and named tuples the values were copied into.

The bounds are the figures after the worker stopped copying a lease, a run key and a
failure into shapes of their own and the notifier recorded a round's last message with its
next claim (docs/benchmarks.md has every run); a change that adds a pass, a transaction, a
statement or a shape to the path fails here.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.conftest import TEST_URL
from tests.integration.fake_servers import SlackFake
from tests.integration.notify_builders import add_channel
import tickwarden.db
from tickwarden import catalog, sanitize
from tickwarden.db import BEGIN, COMMIT, ROLLBACK
from tickwarden.service import build_loops
from tickwarden.store import base
from tickwarden.worker import Worker

T0 = datetime(2026, 11, 30, 12, 0, 20, tzinfo=UTC)
TOKEN = "xoxb-5555-6666-test"
FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default, python: /usr/bin/python3}]  # readable by the sandbox user, whoever runs the test
workflows:
  - name: every-minute
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "* * * * *"}
    policy: {retries: 0, alert_after: 1}
    steps: [{name: load, kind: python, call: "tests.steps:fail"}]
"""


SAVEPOINTS = ("SAVEPOINT", "RELEASE", "ROLLBACK")  # the statements of a savepoint block


class Trace:
    """Counts statements and server transactions on every psycopg connection, and the shapes built, while on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.transactions = 0
        self.statements = 0
        self.shapes: Counter[str] = Counter()
        self.on = False
        self.backends: set[int] = set()  # the server processes the traced code used
        self.listener: psycopg.Connection[Any] | None = None  # the harness's own: not counted
        trace = self
        real_execute = psycopg.Cursor.execute
        real_transaction = psycopg.Connection.transaction
        real_command = tickwarden.db._command

        # Connections inside a transaction opened by a BEGIN sent as a statement (a pipelined
        # transaction): libpq reports a pipeline's transaction status only as of its last sync,
        # so their statements are known to be inside it from the BEGIN … COMMIT around them.
        explicit: set[int] = set()

        def control(query: Any) -> Any:
            """BEGIN, COMMIT or ROLLBACK, sent as psycopg's composed statement or as a named one's text."""
            if not isinstance(query, str):
                return query
            text = " ".join(line for line in query.splitlines() if not line.lstrip().startswith("--"))
            return {"BEGIN": BEGIN, "COMMIT": COMMIT, "ROLLBACK": ROLLBACK}.get(text.strip().rstrip(";").upper(), query)

        def controls(conn: psycopg.Connection[Any], query: Any) -> bool:
            """Count BEGIN, COMMIT, ROLLBACK and a savepoint's statements as the transaction's edges, not as statements."""
            kind = control(query)
            if kind == BEGIN:  # a transaction, not a statement (as when psycopg sends its own BEGIN)
                trace._begins(conn)
                explicit.add(id(conn))
            elif kind in (COMMIT, ROLLBACK):
                explicit.discard(id(conn))
            elif not (isinstance(query, sql.Composed) and query.as_string(conn).split()[0] in SAVEPOINTS):
                return False
            return True  # a savepoint sent in a pipeline: no statement, as psycopg's own savepoint block is none

        executed = [0]  # `execute` calls: a store statement sent without one (`store.base._run`) is counted by `run`
        real_run = base._run

        def count(cur: psycopg.Cursor[Any], query: Any) -> None:
            trace.backends.add(cur.connection.info.backend_pid)
            if not controls(cur.connection, query) and query != "":
                # an empty query (the pool's full liveness check): no statement, no transaction
                if id(cur.connection) not in explicit:
                    trace._begins(cur.connection)
                trace.statements += trace.on

        def execute(cur: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
            executed[0] += 1
            if cur.connection is not trace.listener:
                count(cur, query)
            return real_execute(cur, query, *args, **kwargs)

        def run(cur: psycopg.Cursor[Any], text: str, params: Any) -> None:
            before = executed[0]
            real_run(cur, text, params)
            if executed[0] == before and cur.connection is not trace.listener:  # a prepared statement only sent
                count(cur, text)

        def command(conn: psycopg.Connection[Any], statement: Any) -> None:
            """A transaction's BEGIN, COMMIT or savepoint, which `db._command` sends without a cursor."""
            trace.backends.add(conn.info.backend_pid)
            controls(conn, statement)
            real_command(conn, statement)

        def transaction(conn: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
            trace._begins(conn)
            return real_transaction(conn, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        monkeypatch.setattr(base, "_run", run)
        monkeypatch.setattr(psycopg.Connection, "transaction", transaction)
        monkeypatch.setattr(tickwarden.db, "_command", command)

    def listen(self, conn: psycopg.Connection[Any]) -> None:
        self.listener = conn
        conn.execute("LISTEN tickwarden_wake")

    def woken(self) -> set[str]:
        """The loops the traced code's committed notifications name ('' wakes every loop)."""
        assert self.listener is not None
        self.listener.execute("SELECT 1")  # the server delivers what committed before it
        return {note.payload for note in self.listener.notifies(timeout=0.01) if note.pid in self.backends}

    def _begins(self, conn: psycopg.Connection[Any]) -> None:
        if self.on and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            self.transactions += 1

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or frame.f_code.co_name not in ("__init__", "__new__"):
            return
        first = frame.f_locals.get("self", frame.f_locals.get("_cls"))
        cls = first if isinstance(first, type) else type(first)
        if cls.__module__.startswith("tickwarden") and (dataclasses.is_dataclass(cls) or hasattr(cls, "_fields")):
            self.shapes[f"{cls.__module__}.{cls.__qualname__}"] += 1

    def __enter__(self) -> Trace:
        self.on = True
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        self.on = False


@pytest.fixture
def slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlackFake]:
    monkeypatch.setenv("TW_TEST_SLACK_TOKEN", TOKEN)
    server = SlackFake(token=TOKEN, epoch=int(T0.timestamp())).start()
    yield server
    server.stop()


def test_one_failing_tick_reaches_slack_in_few_passes_transactions_and_shapes(db, clock, slack, tmp_path, monkeypatch):
    clock.set(T0)
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE)
    catalog.apply_file(db, path, T0)
    add_channel(db, T0, tenant="acme", name="alerts", kind="slack", audience="customer",
                config={"channel": "C0ALERTS", "base_url": slack.base_url}, secret_ref="env:TW_TEST_SLACK_TOKEN")
    loops = build_loops(db, "replica-1")
    worker = Worker(db, "worker-1", clock=clock, secret_key="test-signing-key")
    due = {loop.name: T0 for loop in loops} | {worker.name: T0}
    for loop in loops:  # every loop's first pass, before the tick is due, is no part of the path
        due[loop.name] = loop.run_once(T0)
    due[worker.name] = worker.run_once(T0)
    # Redaction's token rules are built once per process, at the first text reduced (lazily: a
    # fifth of a second a process that reduces no text never pays), whichever test that is: no
    # part of the path, whose shapes would otherwise depend on the order the tests ran in.
    sanitize._known_token_rules()

    trace = Trace(monkeypatch)
    passes: Counter[str] = Counter()
    transactions: Counter[str] = Counter()
    now = datetime(2026, 11, 30, 12, 1, tzinfo=UTC)  # the tick fires
    try:
        with psycopg.connect(TEST_URL, autocommit=True) as listener, trace:
            trace.listen(listener)
            while not slack.posts and now < T0 + timedelta(minutes=10):
                clock.set(now)
                ran = True
                while ran and not slack.posts:  # a loop woken by a pass runs at once, as in the service
                    ran = False
                    for loop in [*loops, worker]:
                        if due[loop.name] <= now and not slack.posts:
                            before = trace.transactions
                            due[loop.name] = loop.run_once(now)
                            passes[loop.name] += 1
                            transactions[loop.name] += trace.transactions - before
                            ran = True
                            for name in trace.woken():
                                for woken in due if name == "" or name not in due else [name]:
                                    due[woken] = min(due[woken], now)
                now += timedelta(seconds=5)
    finally:
        worker.close(clock.now())

    assert len(slack.posts) == 1, "one failing tick opens one alert and posts one message"
    text = slack.posts[0]["text"]
    assert "alert opened" in text and "*Owner:* customer" in text and "bad record in column amount" in text
    print(f"\npasses: {sum(passes.values())} {dict(passes)}")
    print(f"transactions: {trace.transactions} {dict(transactions)}")
    print(f"statements: {trace.statements}")
    print(f"shapes: {len(trace.shapes)} {sorted(trace.shapes)}")
    assert now - timedelta(seconds=5) < datetime(2026, 11, 30, 12, 3, tzinfo=UTC), "the message took minutes"
    # bounds: the figures recorded in docs/benchmarks.md ("Traced path"); lower them when the path gets shorter
    # (the worker's exchanges send the contexts' look-up behind every lease, found or not: one statement
    # more, in no round trip of its own; the exchange's result is one shape; a worker's queue entry is one:
    # whether its attempt started or waits to be started by compare-and-set is part of what never runs twice;
    # the ticker's claim carries the earliest-fire probe, in its round trip, which an idle pass needs alone;
    # the worker's poller wake follows its outcome's BEGIN … COMMIT in the same round trip, so that the
    # durable commit does not hold the server's notification lock through its flush: one statement more;
    # its transaction rides in the exchange's pipeline, where libpq's status cannot show it to this count;
    # an idle worker's poll is one read-only look, no transaction and no lock, so the worker that finds
    # the tick due from idle pays that look before its lease: one transaction more, where every idle
    # poll saves one round trip; the step rows ride in the outcome's statement: one statement fewer;
    # the notifier's claim returns its messages' context and its record opens the thread in the same
    # statement, whose answer is one shape, `ThreadOpened`: five statements fewer, one shape more; the lease is
    # one round trip, its writes and contexts sent behind its lock without waiting for the locked rows, so the
    # outcome's lease that finds nothing sends them too, and the process's mark is decided in the server by
    # the first attempt locked, from what the worker hands it, one shape (`LeaseMark`): two statements and
    # one shape more, in one round trip fewer)
    assert sum(passes.values()) <= 8 and trace.transactions <= 15 and trace.statements <= 33
    assert len(trace.shapes) <= 47 and not any(".Decision" in shape for shape in trace.shapes)
