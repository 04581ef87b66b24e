"""The command line starts without the server stack: every CLI call is a fresh interpreter.

The API (FastAPI, Starlette, Uvicorn), the Kubernetes client, the transports (Slack, HTTP),
the templates and the metrics exporter are imported by the commands that use them, inside
those commands, so that `tickwarden --help` and a simple command do not pay seconds of
imports each time they run. A module-level import of one of them in a command module
brings that cost back to every command, and is caught here.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("fastapi", "starlette", "uvicorn", "kubernetes", "slack_sdk", "httpx", "jinja2", "prometheus_client")

PROBE = """
import json, sys
{run}
print("\\n" + json.dumps(sorted(name for name in {heavy!r} if name in sys.modules)))
"""


def imported_after(run: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE.format(run=run, heavy=HEAVY)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_cli_leaves_the_server_stack_unimported():
    assert imported_after("import tickwarden.cli") == []


def test_help_leaves_the_server_stack_unimported():
    run = ("from tickwarden.cli import main\n"
           "sys.argv = ['tickwarden', '--help']\n"
           "try:\n    main()\nexcept SystemExit as exit:\n    assert exit.code in (0, None), exit.code\n")
    assert imported_after(run) == []


def test_a_probe_sees_a_heavy_import():
    """The probe itself reports what a command module would drag in (so an empty list means something)."""
    assert "fastapi" in imported_after("import tickwarden.api.deps")
