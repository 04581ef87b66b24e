"""`tickwarden serve` refuses an address it cannot listen on before it migrates or starts anything."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import psycopg

from tests.dbutil import TEST_URL, drop_schema, make_schema

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"


def _serve(schema: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": TEST_URL, "TICKWARDEN_SCHEMA": schema}
    return subprocess.run([str(BIN), "serve", *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def _tables(schema: str) -> int:
    with psycopg.connect(TEST_URL) as conn:
        return conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                            (schema,)).fetchone()[0]


def test_it_refuses_a_port_out_of_range_as_a_usage_error_and_migrates_nothing():
    schema = make_schema("port")
    try:
        result = _serve(schema, "--port", "70000")
        assert result.returncode == 2
        assert result.stderr.strip() == "tickwarden: --port must be between 1 and 65535."
        assert _tables(schema) == 0
    finally:
        drop_schema(schema)


def test_it_refuses_a_port_in_use_in_one_line_and_migrates_nothing():
    schema = make_schema("port")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            result = _serve(schema, "--port", str(port))
            assert result.returncode == 1
            assert result.stderr.strip() == f"tickwarden: Cannot listen on 127.0.0.1:{port}: Address already in use."
            assert "Traceback" not in result.stderr
            assert _tables(schema) == 0
        finally:
            drop_schema(schema)
