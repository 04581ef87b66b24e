"""Step functions that tests and benchmarks run inside real environment processes."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path


def noop(params, inputs):
    return None


def number(params, inputs):
    print(f"producing {params['value']}")
    return {"value": params["value"]}


def double(params, inputs):
    logging.getLogger("steps").warning("doubling the upstream value")
    return {"value": inputs["first"]["value"] * 2}


def fail(params, inputs):
    print("about to fail")
    raise ValueError("bad record in column amount")


def hang(params, inputs):
    time.sleep(params.get("seconds", 600))
    return "woke up"


def pid(params, inputs):
    return {"pid": os.getpid()}


def die(params, inputs):
    os._exit(9)


def hang_once(params, inputs):
    """Hang the first time (so a test can kill the worker mid-run); succeed afterwards."""
    marker = Path(params["marker"])
    if not marker.exists():
        marker.write_text("started")
        time.sleep(600)
    return {"second": True}


def unserialisable(params, inputs):
    return {1, 2}


def environ(params, inputs):
    import os

    return sorted(os.environ)


def interpreter(params, inputs):
    import sys

    return {"executable": sys.executable, "has_tickwarden": "tickwarden" in sys.modules}


def spawn_later(params, inputs):
    """Start a shell that touches a file after a delay, and return at once without waiting for it."""
    import subprocess

    subprocess.Popen(["sh", "-c", f"sleep {params['delay']}; touch {params['path']}"])


def journal(params, inputs):
    """Note in a shared file when this execution starts and ends, to find executions that overlapped."""
    path = Path(params["path"])
    with path.open("a") as out:
        out.write(f"start {params['key']} {os.getpid()} {time.time():.3f}\n")
    time.sleep(params.get("seconds", 2))
    with path.open("a") as out:
        out.write(f"end {params['key']} {os.getpid()} {time.time():.3f}\n")
    return {"key": params["key"]}


def fail_while(params, inputs):
    """Fail while a marker file exists; succeed once it is gone."""
    if Path(params["marker"]).exists():
        raise RuntimeError("the marker file says this step fails")
    return {"ok": True}
