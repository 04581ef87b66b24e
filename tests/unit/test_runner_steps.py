"""What a python step leaves for the next step of its process: nothing of its variables, nothing of its log capture."""

from __future__ import annotations

import logging
import json
import os
import subprocess
import sys
import types

import pytest

from tickwarden.environments import runner


@pytest.fixture
def environ():
    """os.environ as an environment process has it (a few variables), restored after the test."""
    saved = dict(os.environ)
    for key in list(os.environ):
        if key not in ("PATH", "HOME"):
            del os.environ[key]
    os.environ.update({"LANG": "C.UTF-8", "KEPT": "before"})
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)


def test_every_variable_is_as_before_whatever_the_step_did(environ):
    before = dict(environ)

    def careless_step():
        assert environ["API_TOKEN"] == "s3cret" and environ["LANG"] == "given"
        environ["SET_BY_STEP"] = "x"
        environ["KEPT"] = "changed"
        del environ["HOME"]

    with runner._variables({"API_TOKEN": "s3cret", "LANG": "given"}):
        careless_step()
    assert dict(environ) == before
    assert os.getenv("API_TOKEN") is None and os.getenv("SET_BY_STEP") is None  # gone from the C level too


def test_the_variables_a_step_left_alone_are_not_set_again(environ, monkeypatch):
    # Setting every earlier variable again after each step cost more than the rest of a no-op request.
    puts: list[str] = []
    real = os.putenv
    monkeypatch.setattr(os, "putenv", lambda key, value: (puts.append(os.fsdecode(key)), real(key, value)))
    with runner._variables({"TICKWARDEN_RUN_KEY": "k", "TICKWARDEN_ATTEMPT": "1"}):
        pass
    assert sorted(puts) == ["TICKWARDEN_ATTEMPT", "TICKWARDEN_RUN_KEY"]


def _silence_the_step_log(params, inputs):
    """A step that turns down whatever handler the root logger has, and logs a line of its own."""
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.CRITICAL)
        handler.addFilter(lambda record: False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("steps").warning("first")


def test_each_step_logs_into_its_own_capture_whatever_an_earlier_one_did_to_it(monkeypatch):
    # One handler serves every step of the process (made anew per step it cost more than a no-op
    # step): what a step did to it is undone, and it holds nothing of a step once that step ended.
    module = types.ModuleType("runner_log_steps")
    module.silence = _silence_the_step_log  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "runner_log_steps", module)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # the step sees only the process's own handler
    first = runner._call_python({"call": "runner_log_steps:silence"}, {})
    second = runner._call_python({"call": "tests.steps:double"}, {"first": {"value": 1}})
    assert first["ok"] and second["ok"]
    assert "first" not in second["log"]
    assert second["log"] == "WARNING steps: doubling the upstream value"
    assert runner._step_handler is not None and runner._step_handler not in logging.getLogger().handlers
    assert runner._step_handler.stream.getvalue() == ""


def test_a_steps_variables_reach_what_it_starts_and_leave_with_it(environ):
    # Set and unset at the C level, not only in `os.environ`'s own copy: a child started without
    # an environment of its own inherits the process's.
    show = [sys.executable, "-c", "import os; print(os.environ.get('API_TOKEN'), os.environ.get('KEPT'))"]
    with runner._variables({"API_TOKEN": "s3cret", "KEPT": "given"}):
        during = subprocess.run(show, capture_output=True, text=True, check=True).stdout.split()
    after = subprocess.run(show, capture_output=True, text=True, check=True).stdout.split()
    assert during == ["s3cret", "given"] and after == ["None", "before"]


@pytest.mark.parametrize("named", [False, True])
def test_an_envelope_is_the_line_json_dumps_writes(named):
    # A server or client of an earlier release parses it: the text is the one `json.dumps` gave, to the byte.
    payload = {"op": "run", "inputs": {"x": "é\u2028\"\\\n"}, "environment": {"K": "v"}, "watchdog_ms": 1500}
    challenge = "ab" * 32
    body = runner.dumps_str(payload)
    outer = {"body": body, "mac": runner.sign(b"c" * 32, "request", challenge, body)}
    if named:
        outer["challenge"] = challenge
    line = runner.envelope(b"c" * 32, "request", challenge, payload, named=named)
    assert line == (json.dumps(outer) + "\n").encode()
    assert runner.opened(b"c" * 32, "request", challenge, line.rstrip(b"\n")) == payload


def test_a_step_of_a_module_blocked_in_sys_modules_is_a_resolve_failure(monkeypatch):
    monkeypatch.setitem(sys.modules, "runner_blocked_steps", None)
    answer = runner._call_python({"call": "runner_blocked_steps:noop"}, {})
    assert answer["phase"] == "resolve" and answer["error_type"] == "ModuleNotFoundError"
    assert runner._call_python({"call": "tests.steps:noop"}, {})["ok"]
