"""The command line starts without the server stack: every CLI call is a fresh interpreter.

The API (FastAPI, Starlette, Uvicorn), the Kubernetes client, the transports (Slack, HTTP),
the templates and the metrics exporter are imported by the commands that use them, inside
those commands, so that `tickwarden --help` and a simple command do not pay seconds of
imports each time they run. A module-level import of one of them in a command module
brings that cost back to every command, and is caught here.

The same holds for the database layer, the simulator and the log formatter: a command
that reads the database imports them inside itself, the formatter is built when a first
line is logged, and a constant the help shows (the retention days' bound, the policies'
names, the warm environments kept) lives in a light module that the help and the heavy
module both import.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("fastapi", "starlette", "uvicorn", "kubernetes", "slack_sdk", "httpx", "jinja2", "prometheus_client")
LOADED_ON_USE = ("psycopg", "psycopg_pool", "tickwarden.db", "tickwarden.store", "tickwarden.models",
                 "tickwarden.retention", "tickwarden.simulate.engine", "tickwarden.simulate.scenario",
                 "tickwarden.environments.pool", "tickwarden.triggers.kubernetes_tick", "structlog")
HELP = ("from tickwarden.cli import main\n"
        "sys.argv = ['tickwarden', {args}]\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    assert exit.code in (0, None), exit.code\n")

PROBE = """
import json, sys
{run}
print("\\n" + json.dumps(sorted(name for name in {heavy!r} if name in sys.modules)))
"""


def imported_after(run: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE.format(run=run, heavy=heavy)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_cli_leaves_the_server_stack_unimported():
    assert imported_after("import tickwarden.cli") == []


def test_help_leaves_the_server_stack_unimported():
    assert imported_after(HELP.format(args="'--help'")) == []


def test_importing_the_cli_leaves_the_database_layer_the_simulator_and_the_log_formatter_unimported():
    assert imported_after("import tickwarden.cli", LOADED_ON_USE) == []


def test_help_and_a_command_without_the_database_leave_them_unimported():
    assert imported_after(HELP.format(args="'--help'"), LOADED_ON_USE) == []
    assert imported_after(HELP.format(args="'profile', '0 2 * * *'"), LOADED_ON_USE) == []
    assert imported_after(HELP.format(args="'simulate', '--help'"), LOADED_ON_USE) == []


# What reading a workflow definition needs: YAML, the channels' checks (the transports) and the HTTP client
# those checks load. Nothing that records a tick or a check-in reads a definition.
WORKFLOW_FILE_LAYER = ("tickwarden.workflow_file", "tickwarden.transports", "httpx", "yaml")
# The modules `tickwarden tick` (a CronJob's pod, at every tick of a schedule) and `tickwarden
# checkin` (a job's ping) import in their bodies, through the attempt's execution.
TICK_AND_CHECKIN = ("import tickwarden.cli, tickwarden.cli.catalog_cmd, tickwarden.db, tickwarden.loops, "
                    "tickwarden.triggers.kubernetes, tickwarden.triggers.kubernetes_tick, tickwarden.worker, "
                    "tickwarden.catalog, tickwarden.checkins")


def test_recording_a_tick_or_a_check_in_leaves_the_workflow_file_layer_unimported():
    """Each tick's pod and each ping is a fresh interpreter: the layer cost it some 0.1 s of CPU at every start."""
    assert imported_after(TICK_AND_CHECKIN, WORKFLOW_FILE_LAYER) == []


def test_a_probe_sees_a_heavy_import():
    """The probe itself reports what a command module would drag in (so an empty list means something)."""
    assert "fastapi" in imported_after("import tickwarden.api.deps")
    assert {"psycopg", "tickwarden.store", "tickwarden.simulate.engine"} <= set(
        imported_after("import tickwarden.simulate; tickwarden.simulate.Simulation", LOADED_ON_USE))
    assert set(imported_after("import tickwarden.workflow_file", WORKFLOW_FILE_LAYER)) == set(WORKFLOW_FILE_LAYER)
