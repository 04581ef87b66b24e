"""Logs are JSON lines with a time, a level and ids as fields; text on a terminal; never a secret."""

import io
import json
import logging
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tickwarden import logs

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging():
    root, ours = logging.getLogger(), logging.getLogger("tickwarden")
    handlers, level, our_level = list(root.handlers), root.level, ours.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    ours.setLevel(our_level)


def lines(stream):
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_it_writes_one_json_object_a_line_with_time_level_logger_and_ids():
    out = io.StringIO()
    logs.configure({}, out)
    logging.getLogger("tickwarden.worker").warning("attempt %s failed", 12,
                                                   extra={"attempt_id": 12, "run_id": 7, "workflow_id": 3})
    [line] = lines(out)
    assert line["event"] == "attempt 12 failed" and line["level"] == "warning"
    assert line["logger"] == "tickwarden.worker"
    assert (line["attempt_id"], line["run_id"], line["workflow_id"]) == (12, 7, 3)
    assert line["timestamp"].endswith("Z")
    assert datetime.fromisoformat(line["timestamp"]).tzinfo is not None


def test_ids_bound_for_a_block_are_on_every_line_of_it_and_only_there():
    out = io.StringIO()
    logs.configure({}, out)
    log = logging.getLogger("tickwarden.notifier")
    with logs.bind(alert_id=41):
        log.warning("slack answered 500")
    log.warning("idle")
    inside, outside = lines(out)
    assert inside["alert_id"] == 41 and "alert_id" not in outside


def test_it_never_writes_a_credential_from_a_message_or_a_traceback():
    out = io.StringIO()
    logs.configure({}, out)
    log = logging.getLogger("tickwarden.worker")
    log.warning("connect to postgres://app:hunter2@db.internal/sales failed with token=s3cr3t-value")
    try:
        raise RuntimeError("Authorization: Bearer abc.def.ghi rejected")
    except RuntimeError:
        log.exception("the step failed")
    text = out.getvalue()
    assert "hunter2" not in text and "s3cr3t-value" not in text and "abc.def.ghi" not in text
    assert lines(out)[1]["exception"].startswith("Traceback")


def test_it_writes_plain_text_on_a_terminal_and_json_when_asked():
    term = Terminal()
    logs.configure({}, term)
    logging.getLogger("tickwarden.serve").warning("replica stopping", extra={"run_id": 5})
    line = term.getvalue().strip()
    assert not line.startswith("{")
    stamp, level, rest = line.split(" ", 2)
    assert stamp.endswith("Z") and level == "WARNING"
    assert rest.strip() == "tickwarden.serve: replica stopping  run_id=5"
    forced = Terminal()
    logs.configure({"TICKWARDEN_LOG_FORMAT": "json"}, forced)
    logging.getLogger("tickwarden.serve").warning("again")
    assert json.loads(forced.getvalue())["event"] == "again"


def test_the_level_setting_wins_over_a_command_default():
    out = io.StringIO()
    logs.configure({"TICKWARDEN_LOG_LEVEL": "error"}, out)
    logs.default_level(logging.INFO)  # what `serve` asks for when nothing is set
    log = logging.getLogger("tickwarden.serve")
    log.info("started")
    log.warning("slow")
    log.error("broken")
    assert [line["event"] for line in lines(out)] == ["broken"]
    quiet = io.StringIO()
    logs.configure({}, quiet)
    logs.default_level(logging.INFO)
    log.info("started")
    assert [line["event"] for line in lines(quiet)] == ["started"]


def test_configuring_twice_leaves_one_handler():
    first, second = io.StringIO(), io.StringIO()
    logs.configure({}, first)
    logs.configure({}, second)
    logging.getLogger("tickwarden").warning("once")
    assert first.getvalue() == "" and len(lines(second)) == 1


@pytest.mark.parametrize("setting", [{"TICKWARDEN_LOG_LEVEL": "loud"}, {"TICKWARDEN_LOG_FORMAT": "xml"}])
def test_a_bad_setting_is_one_clear_line_and_a_usage_error(setting):
    env = {"PATH": "/usr/bin:/bin", **setting}
    done = subprocess.run([sys.executable, "-m", "tickwarden", "profile", "0 2 * * *"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("tickwarden: TICKWARDEN_LOG_") and "Traceback" not in done.stderr


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_line_without_traceback_is_written_as_structlogs_formatter_writes_it(fmt):
    # The plain path skips structlog's per-record machinery: its lines must not differ in a field or an order.
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    full = logs.formatter(fmt)
    out = io.StringIO()
    logs.configure({logs.FORMAT_ENV: fmt, logs.LEVEL_ENV: "debug"}, out)
    expected = []
    capture = logging.Handler()
    # Formatted at once, as the line is: the ids bound for a block are there only inside it.
    capture.emit = lambda record: expected.append((record.exc_info, full.format(record)))  # type: ignore[method-assign]
    logging.getLogger().addHandler(capture)
    try:
        log = logging.getLogger("tickwarden.worker")
        with logs.bind(alert_id=41, run_id=9):
            log.info("attempt %s (run %s, workflow %s): %s", 12, 34, "nightly", "succeeded",
                     extra={"attempt_id": 12, "run_id": 34, "workflow_id": 5, "at": datetime(2026, 1, 2),
                            "thing": Opaque()})
        log.warning("connect to postgres://app:hunter2@db.internal/sales failed, token=s3cr3t-value; mail a@b.test")
        log.error("plain %d%%", 5)
        logging.getLogger("elsewhere").critical("ünïcode \"quoted value\" and 'ident'")
    finally:
        logging.getLogger().removeHandler(capture)
    assert len(expected) == 4 and not any(exc_info for exc_info, _ in expected)
    assert out.getvalue().splitlines() == [line for _, line in expected]
    assert "hunter2" not in out.getvalue() and "s3cr3t-value" not in out.getvalue()
    assert "alert_id" in expected[0][1] and "alert_id" not in expected[1][1]


def test_only_a_line_with_a_traceback_goes_through_structlogs_formatter(monkeypatch):
    import structlog

    calls = []
    real = structlog.stdlib.ProcessorFormatter.format
    monkeypatch.setattr(structlog.stdlib.ProcessorFormatter, "format",
                        lambda self, record: calls.append(record.getMessage()) or real(self, record))
    out = io.StringIO()
    logs.configure({logs.FORMAT_ENV: "json"}, out)
    log = logging.getLogger("tickwarden.worker")
    log.warning("attempt %s: succeeded", 1, extra={"attempt_id": 1})
    try:
        raise RuntimeError("password=hunter2")
    except RuntimeError:
        log.exception("the step failed")
    assert calls == ["the step failed"]
    plain, failed = lines(out)
    assert plain["event"] == "attempt 1: succeeded" and plain["attempt_id"] == 1
    assert failed["exception"].startswith("Traceback") and "hunter2" not in out.getvalue()
