"""The README's quick start, as written, on the embedded database: the quickstart workflow ticks green."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop_embedded(data: Path) -> None:
    pidfile = data / "pgdata" / "postmaster.pid"
    if pidfile.exists():
        os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)


def test_the_readme_quickstart_runs_green_ticks_on_the_embedded_database(tmp_path, embedded_data_dir):
    readme = (ROOT / "README.md").read_text()
    assert ".venv/bin/tickwarden apply examples/quickstart.yaml" in readme
    assert ".venv/bin/tickwarden serve --workers 2" in readme
    env = {**os.environ, "TICKWARDEN_DATA_DIR": str(embedded_data_dir)}
    for name in ("TICKWARDEN_DATABASE_URL", "TICKWARDEN_SCHEMA", "TICKWARDEN_QUICKSTART_DB"):
        env.pop(name, None)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN), *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=180)

    try:
        applied = cli("apply", "examples/quickstart.yaml")
        assert applied.returncode == 0, applied.stderr
        log = open(tmp_path / "serve.log", "w+")  # noqa: SIM115 - closed below, after serve exits
        # --port only so that parallel tests do not contend for 8080.
        serve = subprocess.Popen([str(BIN), "serve", "--workers", "2", "--port", str(_free_port())], cwd=ROOT,
                                 env=env, stdout=log, stderr=subprocess.STDOUT)
        ticks: list[dict] = []
        try:
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and serve.poll() is None:
                listed = cli("runs", "acme/quickstart", "--json")
                assert listed.returncode == 0, listed.stderr
                ticks = [r for r in json.loads(listed.stdout) if not r["manual"] and r["status"] != "queued"]
                if any(r["status"] == "succeeded" for r in ticks):
                    break
                time.sleep(3)
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=60)
            log.seek(0)
            output = log.read()
            log.close()
        assert any(r["status"] == "succeeded" for r in ticks), (ticks, output)
        assert all(r["status"] in ("succeeded", "running") for r in ticks), ticks
        alerts = cli("alerts", "--json")
        assert alerts.returncode == 0 and json.loads(alerts.stdout) == []
        assert "no such secret" not in output and "Traceback" not in output, output
    finally:
        _stop_embedded(embedded_data_dir)
