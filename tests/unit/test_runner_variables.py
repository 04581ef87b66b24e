"""The variables a python step is given are exposed for that call only, and restored at the cost of what changed."""

from __future__ import annotations

import os

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
