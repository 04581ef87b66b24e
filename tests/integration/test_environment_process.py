import time

import pytest

from tickwarden.environments import EnvironmentFailed, EnvironmentProcess, WatchdogTimeout


def run(process, call, params=None, inputs=None, tenant=1, timeout=10):
    request = {"op": "run", "tenant_id": tenant, "step": {"name": "s", "kind": "python", "call": f"tests.steps:{call}",
                                                          "params": params or {}}, "inputs": inputs or {}}
    return process.call(request, timeout)


@pytest.fixture
def process():
    proc = EnvironmentProcess(1)
    yield proc
    proc.kill()


def test_it_answers_with_the_output_and_the_captured_log(process):
    answer = run(process, "number", {"value": 3})
    assert answer == {"ok": True, "output": {"value": 3}, "log": "producing 3"}
    assert process.cold_start_ms > 0


def test_the_runner_refuses_a_request_of_another_tenant(process):
    answer = run(process, "noop", tenant=2)
    assert not answer["ok"] and answer["phase"] == "isolation"


def test_the_watchdog_kills_the_process_group_at_the_timeout(process):
    started = time.monotonic()
    with pytest.raises(WatchdogTimeout):
        run(process, "hang", timeout=1)
    assert 1 <= time.monotonic() - started < 3 and not process.alive()


def test_a_process_that_dies_mid_request_is_reported(process):
    with pytest.raises(EnvironmentFailed, match="died"):
        run(process, "die")


def test_a_missing_interpreter_is_an_environment_failure():
    with pytest.raises(EnvironmentFailed, match="could not be started"):
        EnvironmentProcess(1, "/nonexistent/python")


def test_a_value_that_is_not_json_is_a_step_failure(process):
    answer = run(process, "unserialisable")
    assert not answer["ok"] and answer["phase"] == "output" and "not JSON" in answer["error"]
