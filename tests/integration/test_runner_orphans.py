"""A killed worker takes the subprocesses its steps started with it, and leaves no socket or directory behind."""

import json
import os
import signal
import subprocess
import sys
import time

WORKER = """
import json, sys, time
from tickwarden.environments import EnvironmentProcess
proc = EnvironmentProcess(1)
request = {"op": "run", "tenant_id": 1, "inputs": {},
           "step": {"name": "s", "kind": "python", "call": "tests.steps:spawn_later",
                    "params": {"delay": 2, "path": sys.argv[1]}}}
answer = proc.call(request, 10)
print(json.dumps({"ok": answer.get("ok"), "runner": proc.pid, "socket": proc._socket}), flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_it_kills_the_steps_subprocesses_when_the_worker_is_killed(tmp_path):
    marker = tmp_path / "side-effect"
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(marker)], stdout=subprocess.PIPE, text=True,
                              cwd=os.getcwd())
    try:
        line = worker.stdout.readline()
        assert '"ok": true' in line, line
        started = json.loads(line)
        runner, socket_path = started["runner"], started["socket"]
        assert os.path.basename(os.path.dirname(socket_path)).startswith("tickwarden-env-")  # made for it alone
        worker.send_signal(signal.SIGKILL)
        worker.wait(5)
        time.sleep(3.5)  # past the step subprocess's delay and the runner's parent check
        assert not marker.exists(), "a step's subprocess outlived its killed worker"
        assert not _alive(runner)
        # The worker could not remove what its environment left in the temporary directory: the runner did.
        assert not os.path.exists(socket_path)
        assert not os.path.exists(os.path.dirname(socket_path))
    finally:
        if worker.poll() is None:
            worker.kill()
