"""Routing: a channel subscribes to severities and event kinds; left out, it hears everything."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.notify_builders import add_event, open_alert, outbox
from tickwarden import catalog
from tickwarden.errors import InvalidInput
from tickwarden.notifier import Notifier
from tickwarden.transports.recording import RecordingTransport

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

FLEET = """
tenants:
  - {name: acme}
channels:
  - {tenant: acme, name: tickets, kind: webhook, audience: customer, config: {url: "https://tickets.acme.test/hook"},
     severities: [warning]}
  - {tenant: acme, name: everything, kind: webhook, audience: customer, config: {url: "https://all.acme.test/hook"}}
platform_channels:
  - {name: pager, kind: pagerduty, config: {}, secret_ref: "env:PD_KEY", severities: [critical],
     events: [opened, escalated, resolved]}
"""


def apply(db, tmp_path: Path, text: str = FLEET):
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return catalog.apply_file(db, path, NOW)


def rows_by_channel(db) -> dict[str, list[str]]:
    with db.connection() as conn:
        names = dict(conn.execute("SELECT id, name FROM notification_channels").fetchall())
    routed: dict[str, list[str]] = {name: [] for name in names.values()}
    for row in outbox(db):
        routed[names[row["channel_id"]]].append(row["kind"])
    return routed


def test_a_ticket_channel_takes_warnings_and_the_pager_only_criticals_and_escalations(db, clock, tmp_path):
    apply(db, tmp_path)
    alert = open_alert(db, clock.now(), severity="warning")
    add_event(db, alert, "noted", clock.advance(60), note="looking")
    add_event(db, alert, "escalated", clock.advance(60))
    add_event(db, alert, "noted", clock.advance(60), note="still looking")
    add_event(db, alert, "resolved", clock.advance(60))
    assert rows_by_channel(db) == {
        "tickets": ["opened", "noted"],
        "everything": ["opened", "noted", "escalated", "noted", "resolved"],
        "pager": ["escalated", "resolved"],
    }


def test_a_channel_without_routing_hears_every_event_as_before(db, clock, tmp_path):
    apply(db, tmp_path)
    alert = open_alert(db, clock.now(), severity="critical")
    add_event(db, alert, "reassigned", clock.advance(60))
    assert rows_by_channel(db)["everything"] == ["opened", "reassigned"]
    assert rows_by_channel(db)["pager"] == ["opened"], "the pager takes no reassignment"
    assert rows_by_channel(db)["tickets"] == [], "the ticket channel takes no critical"


def test_routed_rows_are_delivered_by_the_notifier_in_their_own_thread(db, clock, tmp_path):
    apply(db, tmp_path)
    with db.connection() as conn:  # files take real transports only; the test one records instead of sending
        conn.execute("UPDATE notification_channels SET kind = 'recording'")
    alert = open_alert(db, clock.now(), severity="warning")
    add_event(db, alert, "escalated", clock.advance(60))
    recorder = RecordingTransport()
    Notifier(db, "n1", {"recording": recorder}).run_once(clock.advance(1))
    assert len(recorder.messages) == 4  # tickets: opened; everything: opened, escalated; pager: escalated
    assert {r["status"] for r in outbox(db)} == {"sent"}


def test_changing_a_channels_routing_is_an_update_and_reapplying_it_changes_nothing(db, tmp_path):
    apply(db, tmp_path)
    again = apply(db, tmp_path)
    assert again.counts["channel"].get("updated", 0) == 0
    edited = apply(db, tmp_path, FLEET.replace("severities: [warning]", "severities: [warning, critical]"))
    assert edited.counts["channel"]["updated"] == 1


@pytest.mark.parametrize(("edit", "fragment"), [
    ("severities: [warning]}", "severities: [info]}"),
    ("events: [opened, escalated, resolved]", "events: [opened, failed]"),
    ("severities: [warning]}", "severities: []}"),
])
def test_it_refuses_a_routing_it_does_not_know_with_one_sentence_and_writes_nothing(db, tmp_path, edit, fragment):
    with pytest.raises(InvalidInput) as caught:
        apply(db, tmp_path, FLEET.replace(edit, fragment))
    message = str(caught.value)
    assert message.startswith("fleet.yaml: ") and "\n" not in message
    assert ("severities" in message) or ("events" in message)
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM notification_channels").fetchone()[0] == 0
