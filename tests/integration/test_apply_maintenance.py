"""A workflow file's `maintenance:` list: validated before anything is written, replaced on each apply,
and never touching the windows operators added through the CLI or the API."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tickwarden import catalog, maintenance
from tickwarden.errors import Conflict, InvalidInput

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

FILE = """
tenants: [{name: acme}]
users: [{email: ops@acme.test}]
environments: [{name: default}]
workflows:
  - name: nightly
    environment: default
    publisher: ops@acme.test
    schedule: {cron: "0 2 * * *"}
    maintenance:
      - {start: "2026-12-01T01:00:00Z", end: "2026-12-01T03:00:00Z", note: warehouse move}
      - {cron: "0 1 * * 6", duration: 2h, timezone: Europe/Berlin}
    steps:
      - {name: load, kind: python, call: "tickwarden.examples_steps:noop"}
"""


def apply(db, tmp_path: Path, text: str = FILE):
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return catalog.apply_file(db, path, NOW)


def windows(db):
    with db.transaction() as store:
        return maintenance.list_windows(store, "acme")


def test_a_files_windows_are_stored_and_reapplying_changes_nothing(db, tmp_path):
    apply(db, tmp_path)
    stored = windows(db)
    assert [(w.workflow, w.source, w.describe()) for w in stored] == [
        ("nightly", "file", "2026-12-01T01:00:00Z – 2026-12-01T03:00:00Z"),
        ("nightly", "file", "0 1 * * 6 (Europe/Berlin) for 2h"),
    ]
    again = apply(db, tmp_path)
    assert [w.id for w in windows(db)] == [w.id for w in stored]
    assert not [c for c in again.changes if c["kind"] == "maintenance"]


def test_editing_the_list_replaces_the_files_windows_and_keeps_the_operators(db, tmp_path, clock):
    apply(db, tmp_path)
    with db.transaction() as store:
        mine = maintenance.add_window(store, "acme", "nightly",
                                      maintenance.window_spec(cron="0 3 * * *", duration="30m"), "oncall", NOW)
    report = apply(db, tmp_path, FILE.replace("      - {cron: \"0 1 * * 6\", duration: 2h, timezone: Europe/Berlin}\n",
                                              ""))
    assert {"kind": "maintenance", "name": "acme/nightly", "change": "updated"} in report.changes
    assert sorted((w.source, w.cron) for w in windows(db)) == [("api", "0 3 * * *"), ("file", None)]
    with db.transaction() as store, pytest.raises(Conflict) as caught:
        maintenance.remove_window(store, next(w.id for w in windows(db) if w.source == "file"))
    assert "remove it there and apply the file" in caught.value.message
    assert mine.id in [w.id for w in windows(db)]


@pytest.mark.parametrize(("edit", "says"), [
    (('end: "2026-12-01T03:00:00Z"', 'end: "2026-11-30T03:00:00Z"'),
     "fleet.yaml: workflows[0].maintenance[0]: the window's end must be after its start."),
    (("duration: 2h", "duration: 2 hours"), "fleet.yaml: workflows[0].maintenance[1]: the window's duration"),
    (("timezone: Europe/Berlin", "timezone: Mars/Olympus"), "fleet.yaml: workflows[0].maintenance[1]: the window's cron"),
    (("note: warehouse move", "reason: warehouse move"), "fleet.yaml: workflows[0].maintenance[0].reason: unknown key."),
])
def test_a_bad_window_in_a_file_is_one_sentence_and_nothing_is_written(db, tmp_path, edit, says):
    with pytest.raises(InvalidInput) as caught:
        apply(db, tmp_path, FILE.replace(*edit))
    assert caught.value.message.startswith(says) and "\n" not in caught.value.message
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM workflows").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM maintenance_windows").fetchone()[0] == 0
