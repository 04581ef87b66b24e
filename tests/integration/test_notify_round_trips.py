"""What a delivery pass costs the database: statements per message, and what the look spares."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.dbutil import TEST_URL
from tests.integration.notify_builders import add_channel, add_event, open_alert, outbox
from tests.integration.test_worker_round_trips import Traced as WorkerTraced
from tickwarden.db import Database, DedicatedDatabase
from tickwarden.notifier import Notifier
from tickwarden.transports.recording import RecordingTransport


class Traced(WorkerTraced):
    def waits(self) -> int:
        """Round trips: each Sync, Flush or simple Query, where the client waits for the server."""
        return sum(1 for message, _ in self.messages() if message in ("Sync", "Flush", "Query"))


@pytest.fixture
def traced(db, tmp_path):
    tracer = Traced(tmp_path / "trace")
    with Database(TEST_URL, schema=db.schema, max_size=2, configure=tracer.configure) as traced_db:
        traced_db.pool.wait()  # see the `db` fixture: one connection unless a second borrower needs one
        yield traced_db, tracer


def test_a_pass_delivering_one_message_costs_a_look_a_claim_and_a_record(db, clock, traced):
    traced_db, tracer = traced
    add_channel(db, clock.now(), tenant="acme", name="rec", kind="recording", audience="customer")
    open_alert(db, clock.now())
    recorder = RecordingTransport()
    notifier = Notifier(traced_db, "n1", {"recording": recorder})
    tracer.reset()
    assert notifier.run_once(clock.now()) == clock.now() + notifier.poll
    assert len(recorder.messages) == 1 and notifier.last_pass.sent == 1
    # the look; BEGIN, the claim with the messages' context, the tick facts, COMMIT; BEGIN, the
    # record with the thread it opened, the look at what is due next, COMMIT. No release of
    # stale claims or held rows: the look found none.
    assert tracer.statements() == 9
    row = outbox(db)[0]
    assert row["status"] == "sent" and row["locked_by"] is None
    with db.connection() as conn:
        assert conn.execute("SELECT thread_key FROM notification_threads").fetchall() == [(recorder.messages[0].thread_key,)]


def test_a_reply_is_claimed_in_the_round_after_its_first_message_is_recorded(db, clock, traced):
    traced_db, tracer = traced
    add_channel(db, clock.now(), tenant="acme", name="rec", kind="recording", audience="customer")
    alert_id = open_alert(db, clock.now())
    add_event(db, alert_id, "acknowledged", clock.now())
    recorder = RecordingTransport()
    notifier = Notifier(traced_db, "n1", {"recording": recorder})
    tracer.reset()
    notifier.run_once(clock.now())
    assert [m.reply for m in recorder.messages] == [False, True]
    assert recorder.messages[1].thread_key == recorder.messages[0].thread_key
    # the look; the first round (4); BEGIN, the first message's record, the look that finds the
    # reply due, its claim, its facts, COMMIT; BEGIN, the reply's record, the look, COMMIT
    assert tracer.statements() == 1 + 4 + 6 + 4
    assert [r["status"] for r in outbox(db)] == ["sent", "sent"]


def test_a_message_recorded_on_its_own_is_one_statement_that_commits_without_waiting_for_the_disk(db, clock, traced):
    traced_db, tracer = traced
    add_channel(db, clock.now(), tenant="acme", name="rec", kind="recording", audience="customer")
    open_alert(db, clock.now())
    open_alert(db, clock.now(), workflow="other")
    recorder = RecordingTransport()
    notifier = Notifier(traced_db, "n1", {"recording": recorder})
    tracer.reset()
    notifier.run_once(clock.now())
    assert len(recorder.messages) == 2 and notifier.last_pass.sent == 2
    # the look; the first round (4); the first message's record, alone in autocommit (no BEGIN,
    # SET LOCAL and COMMIT of its own); the second's record with the look, in a transaction (4)
    assert tracer.statements() == 1 + 4 + 1 + 4
    assert [r["status"] for r in outbox(db)] == ["sent", "sent"]
    open_alert(db, clock.now(), workflow="third")
    with traced_db.transaction() as store:
        [claimed] = store.outbox.claim_outbox("n1", clock.now(), clock.now() + timedelta(minutes=5), 10, ["recording"])
    with traced_db.autocommit() as store:  # relaxed is the record's own transaction's only: the session stays durable
        assert store.outbox.record_sent(claimed, "n1", clock.now(), relaxed=True)()
        assert store.conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"


def test_the_look_says_when_a_held_delivery_awaits_its_release(db, clock):
    add_channel(db, clock.now(), tenant="acme", name="rec", kind="recording", audience="customer")
    open_alert(db, clock.now())
    end = clock.now() + timedelta(hours=1)
    with db.connection() as conn:
        conn.execute("UPDATE notification_outbox SET status = 'held', next_attempt_at = %s", (end,))
        conn.commit()
    with db.transaction() as store:
        assert store.outbox.look(["recording"], clock.now()) == (False, False, end)
        assert store.outbox.look(["recording"], end) == (False, True, end)
    recorder = RecordingTransport()
    Notifier(db, "n1", {"recording": recorder}).run_once(end)
    assert len(recorder.messages) == 1 and outbox(db)[0]["status"] == "sent"


def test_on_a_pipelined_connection_a_pass_waits_once_for_its_claim_and_never_for_a_record(db, clock, tmp_path):
    add_channel(db, clock.now(), tenant="acme", name="rec", kind="recording", audience="customer")
    first = open_alert(db, clock.now())
    second = open_alert(db, clock.now(), workflow="other")
    tracer = Traced(tmp_path / "trace")
    dedicated = DedicatedDatabase(TEST_URL, schema=db.schema)
    try:
        tracer.configure(dedicated._conn)
        recorder = RecordingTransport()
        notifier = Notifier(dedicated, "n1", {"recording": recorder})
        tracer.reset()
        notifier.run_once(clock.now())
        assert sorted(m.alert_id for m in recorder.messages) == sorted([first, second])
        # the look; the claim with its tick facts; the first message's record (its own transaction,
        # read later) and the second's with the look at what is due next: 3 (4 when the first
        # record was read at once)
        assert tracer.waits() == 3
        assert notifier.last_pass.sent == 2  # both records read, after the look that carried them
    finally:
        dedicated.close()
    assert [r["status"] for r in outbox(db)] == ["sent", "sent"]
