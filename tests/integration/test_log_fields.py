"""The lines the loops write about one run or one alert carry its ids as fields."""

import io
import json
import logging

import pytest

from tests.execution_helpers import SECRET, make_runnable, python_step, queue_run
from tests.integration.fake_servers import free_port
from tests.integration.notify_builders import add_channel, open_alert
from tickwarden import logs
from tickwarden.notifier import Notifier
from tickwarden.transports.webhook import WebhookTransport
from tickwarden.worker import Worker


@pytest.fixture
def json_log():
    root, ours = logging.getLogger(), logging.getLogger("tickwarden")
    handlers, level, our_level = list(root.handlers), root.level, ours.level
    out = io.StringIO()
    logs.configure({"TICKWARDEN_LOG_LEVEL": "info"}, out)
    yield lambda: [json.loads(line) for line in out.getvalue().splitlines()]
    root.handlers[:] = handlers
    root.setLevel(level)
    ours.setLevel(our_level)


def test_the_worker_logs_each_finished_attempt_with_its_attempt_run_and_workflow(db, clock, json_log):
    workflow = make_runnable(db, clock.now(), [python_step("a", "noop")])
    run = queue_run(db, workflow, clock.now(), clock.now())
    worker = Worker(db, "w1", clock=clock, secret_key=SECRET)
    try:
        worker.run_once(clock.now())
    finally:
        worker.environments.close(clock.now())
    [line] = [entry for entry in json_log() if entry.get("logger") == "tickwarden.worker"]
    assert line["run_id"] == run.id and line["workflow_id"] == workflow.id and isinstance(line["attempt_id"], int)
    assert line["level"] == "info" and line["timestamp"].endswith("Z")


def test_a_notification_given_up_names_its_alert_and_channel(db, clock, json_log):
    channel = add_channel(db, clock.now(), tenant=None, name="hook", kind="webhook", audience="engineering",
                          config={"url": f"http://127.0.0.1:{free_port()}/"})
    alert = open_alert(db, clock.now())
    Notifier(db, "n1", {"webhook": WebhookTransport(timeout=2)}, max_tries=1).run_once(clock.now())
    [line] = [entry for entry in json_log() if entry.get("logger") == "tickwarden.notifier"]
    assert line["alert_id"] == alert and line["channel_id"] == channel.id and line["level"] == "warning"
