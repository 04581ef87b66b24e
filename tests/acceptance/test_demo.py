"""`make demo` and `tickwarden demo` on a fresh machine: no test extras, no forced width, nothing left running."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
pytestmark = pytest.mark.slow


def test_make_demo_installs_tickwarden_without_the_test_extras(tmp_path):
    planned = subprocess.run(["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, check=False,
                             text=True, timeout=60)
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line and "-e" in line]
    assert installs and all("[test]" not in line for line in installs), planned.stdout


def test_demo_fits_80_columns_and_stops_the_embedded_server_it_started(embedded_data_dir):
    data = embedded_data_dir
    env = {**os.environ, "TICKWARDEN_DATA_DIR": str(data), "COLUMNS": "80"}
    env.pop("TICKWARDEN_DATABASE_URL", None)
    done = subprocess.run([str(BIN), "demo"], cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600)
    pidfile = data / "pgdata" / "postmaster.pid"
    try:
        assert done.returncode == 0, done.stderr
        assert "one message per failure would have sent" in done.stdout
        assert all(len(line) <= 80 for line in done.stdout.splitlines()), done.stdout
        deadline = time.monotonic() + 30
        while pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pidfile.exists(), "the embedded PostgreSQL is still running after the demo"
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text().split()[0]), 15)
