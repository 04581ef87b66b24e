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


def probe_platform(params, inputs):
    """Try every way a hostile step might reach the worker's secrets; report what it got."""
    import hashlib

    found = {"environ": dict(os.environ)}
    for label, path in (("proc_environ", f"/proc/{params['worker_pid']}/environ"),
                        ("key_file", params["key_file"]), ("data_file", params["data_file"])):
        try:
            found[label] = Path(path).read_bytes().decode(errors="replace")
        except OSError as exc:
            found[label] = f"refused: {type(exc).__name__}"
    try:
        found["data_dir"] = sorted(os.listdir(params["data_dir"]))
    except OSError as exc:
        found["data_dir"] = f"refused: {type(exc).__name__}"
    found["uid"] = os.getuid()
    found["cwd"] = os.getcwd()
    token = os.environ.get("API_TOKEN")
    found["declared_digest"] = hashlib.sha256(token.encode()).hexdigest()[:12] if token else None
    return found


def run_key(params, inputs):
    found = {k: os.environ.get(k) for k in ("TICKWARDEN_RUN_KEY", "TICKWARDEN_ATTEMPT")}
    # One character at a time, so the test can check the credential it was handed
    # (whole, it is scrubbed from the stored output like every value a step is given).
    found["chars"] = list(os.environ.get("TICKWARDEN_RUN_CREDENTIAL", ""))
    return found


def leak(params, inputs):
    """Print, return and raise with credentials, the way careless customer code does."""
    given = os.environ.get(params.get("echo", ""), "")
    print(params["text"])
    print(f"connecting with {given}")
    if params.get("succeed"):
        return {"note": params["text"], "used": given}
    raise RuntimeError(f"{params['text']} (used {given})")
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


def rows(params, inputs):
    """Report committing `params['rows']` rows, as a loading step does."""
    return {"rows": params["rows"]}


def secret_digest(params, inputs):
    """The digest of a declared secret (whole, the value would be scrubbed from the output)."""
    import hashlib

    value = os.environ.get(params["name"])
    return {"digest": hashlib.sha256(value.encode()).hexdigest()[:12] if value is not None else None}


def tally(params, inputs):
    """Note in a shared file which attempt of which run this execution is, to find attempts run twice."""
    with Path(params["path"]).open("a") as out:
        out.write(f"{os.environ.get('TICKWARDEN_RUN_KEY')} {os.environ.get('TICKWARDEN_ATTEMPT')}\n")
    return {"ok": True}


def unstorable(params, inputs):
    """Text PostgreSQL cannot store (NUL, a lone surrogate) in the log, the error and the output."""
    print("before\x00after \ud800")
    if params.get("fail"):
        raise ValueError("bad\x00byte \udfff")
    return {"text\x00": "a\x00b\ud800", "rows": 3}
