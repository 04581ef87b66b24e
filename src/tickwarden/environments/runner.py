"""The execution server inside a warm environment: one process per (tenant, environment).

Started by a worker as `PYTHON runner.py --tenant ID` with the environment's own
interpreter, so it imports only the standard library (and psycopg, lazily, for sql
steps). It reads one JSON request per line on stdin and answers one JSON line on a
private copy of stdout; the step's own prints and logging are captured per request
and returned as its log. It serves one tenant only and refuses requests of another,
and it exits when its worker dies (its parent changes), so no orphan keeps running.

Requests: {"op": "ping"} · {"op": "run", "tenant_id", "step", "inputs", "environment" (python: the
declared secrets and run variables), "database_url", "platform_database", "timeout_ms" (sql)}
· {"op": "shutdown"}. Answers: {"ok": true, ...} or {"ok": false, "error", "error_type",
"phase"} where phase is `resolve` (the call could not be imported), `connect`
(the database could not be reached), `refused` (it is the platform's own database), `timeout` (the server cancelled the query at
its statement timeout), `output` (not JSON) or `step` (the step raised).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import os
import sys
import threading
import time
import traceback

LOG_LINES = 200


def _watch_parent(parent: int) -> None:
    # Polling getppid is portable; when the worker is killed we are re-parented.
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.5)


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-LOG_LINES:])


def _resolve(call: str):
    module_name, _, attr = call.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr)


@contextlib.contextmanager
def _variables(given: dict):
    """Expose the step's declared secrets and run variables for this call only.

    The process itself starts with next to nothing; what one step was given must
    not linger for the next step of the same environment.
    """
    saved = dict(os.environ)
    os.environ.update({str(k): str(v) for k, v in given.items()})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run_python(step: dict, inputs: dict, given: dict | None = None) -> dict:
    with _variables(given or {}):
        return _call_python(step, inputs)


def _call_python(step: dict, inputs: dict) -> dict:
    try:
        fn = _resolve(step["call"])
    except Exception as exc:  # ImportError, AttributeError, anything the import raised
        return {"ok": False, "phase": "resolve", "error_type": type(exc).__name__, "error": str(exc)}
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            output = fn(dict(step.get("params") or {}), inputs)
    except BaseException as exc:  # the step's own failure, whatever it is
        if isinstance(exc, KeyboardInterrupt):
            raise
        frames = traceback.format_exception_only(type(exc), exc)
        return {
            "ok": False,
            "phase": "step",
            "error_type": type(exc).__name__,
            "error": str(exc) or type(exc).__name__,
            "log": _tail(buffer.getvalue() + "".join(frames)),
        }
    finally:
        root.removeHandler(handler)
    try:
        json.dumps(output)
    except (TypeError, ValueError) as exc:
        return {"ok": False, "phase": "output", "error_type": type(exc).__name__,
                "error": f"the step returned a value that is not JSON ({type(output).__name__})",
                "log": _tail(buffer.getvalue())}
    return {"ok": True, "output": output, "log": _tail(buffer.getvalue())}


# The same statement as the store's `secret_platform_identity`: both sides must format alike.
IDENTITY = ("SELECT current_database() || '/' || current_setting('port') || '/' "
            "|| extract(epoch FROM pg_postmaster_start_time())::text")
# No apostrophes: redaction would take the text between two of them for a quoted value.
REFUSED = ("refused: this is the platform database of tickwarden, which no tenant step may use "
           "(store the URL of the tenant database with `tickwarden secrets set`)")


def _run_sql(step: dict, url: str, timeout_ms: int | None = None, platform: str | None = None) -> dict:
    try:
        import psycopg
    except ImportError as exc:
        return {"ok": False, "phase": "resolve", "error_type": type(exc).__name__,
                "error": "psycopg is not installed in this environment"}
    received = time.monotonic()
    try:
        conn = psycopg.connect(url, connect_timeout=max(2, min(10, int((timeout_ms or 10000) / 1000))))
    except psycopg.Error as exc:
        return {"ok": False, "phase": "connect", "error_type": type(exc).__name__, "error": str(exc)}
    try:
        with conn:
            with conn.cursor() as cur:
                # What the server says it is, after connecting: a URL can name the platform's
                # database in many spellings (another host alias, a socket, an IP), the server only one.
                if platform is not None:
                    cur.execute(IDENTITY)
                    row = cur.fetchone()
                    if row is not None and row[0] == platform:
                        return {"ok": False, "phase": "refused", "error_type": "PlatformDatabase", "error": REFUSED}
                if timeout_ms:
                    # The watchdog kills this process at the timeout, but the server would
                    # keep running the query; make the server give up by then too,
                    # counting the time the connection took.
                    left = max(int(timeout_ms - (time.monotonic() - received) * 1000), 1)
                    cur.execute("SELECT set_config('statement_timeout', %s, false)", (str(left),))
                cur.execute(step["query"])
                columns = [c.name for c in cur.description or []][:5]
                # Count rows without keeping them: values are customer data.
                rows = sum(1 for _ in cur) if cur.description else max(cur.rowcount, 0)
    except psycopg.errors.QueryCanceled as exc:
        return {"ok": False, "phase": "timeout", "error_type": type(exc).__name__, "error": str(exc)}
    except psycopg.OperationalError as exc:
        return {"ok": False, "phase": "connect", "error_type": type(exc).__name__, "error": str(exc)}
    except psycopg.Error as exc:
        return {"ok": False, "phase": "step", "error_type": type(exc).__name__, "error": str(exc)}
    finally:
        conn.close()
    return {"ok": True, "output": {"rows": rows, "columns": columns}, "log": f"{rows} rows"}


def serve(tenant_id: int, requests, answers) -> None:
    """Answer requests until shutdown or end of input."""
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        if op == "shutdown":
            answer = {"ok": True}
        elif op == "ping":
            answer = {"ok": True, "pid": os.getpid(), "tenant_id": tenant_id}
        elif op == "run" and request.get("tenant_id") != tenant_id:
            answer = {"ok": False, "phase": "isolation", "error_type": "IsolationError",
                      "error": "this environment serves another tenant"}
        elif op == "run":
            step = request["step"]
            if step.get("kind") == "sql":
                answer = _run_sql(step, request.get("database_url") or "", request.get("timeout_ms"),
                                  request.get("platform_database"))
            else:
                answer = _run_python(step, request.get("inputs") or {}, request.get("environment"))
        else:
            answer = {"ok": False, "phase": "protocol", "error_type": "ProtocolError", "error": f"unknown op {op!r}"}
        answers.write(json.dumps(answer, default=str) + "\n")
        answers.flush()
        if op == "shutdown":
            return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="tickwarden environment runner")
    parser.add_argument("--tenant", type=int, required=True)
    parser.add_argument("--path", action="append", default=[], help="extra import path")
    args = parser.parse_args(argv)
    # Imports resolve from the worker's working directory and the configured paths,
    # not from this file's folder.
    sys.path[0:1] = [os.getcwd(), *args.path]
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray writes to fd 1 (C extensions, subprocesses) must not corrupt answers
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    serve(args.tenant, io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8"), answers)


if __name__ == "__main__":
    main()
