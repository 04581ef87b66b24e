"""The API as a user runs it: `tickwarden tokens create`, then `tickwarden serve`, then HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.apiutil import free_port
from tests.dbutil import TEST_URL

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
pytestmark = pytest.mark.slow


@pytest.fixture
def env(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path)}
    env.pop("TICKWARDEN_SCHEMA", None)
    return env


def cli(env, *args):
    return subprocess.run([str(BIN), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_a_token_created_on_the_command_line_works_against_the_served_api(env):
    assert cli(env, "apply", str(QUICKSTART)).returncode == 0
    created = cli(env, "tokens", "create", "--tenant", "acme", "--name", "alice", "--json")
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)["token"]
    platform = cli(env, "tokens", "create", "--platform", "--name", "oncall").stdout.strip()
    assert platform.startswith("twk_") and platform != token
    listed = json.loads(cli(env, "tokens", "list", "--json").stdout)
    assert {(t["name"], t["role"], t["tenant"]) for t in listed} == {("alice", "member", "acme"),
                                                                     ("oncall", "platform", None)}
    assert token not in json.dumps(listed)
    bad = cli(env, "tokens", "create", "--name", "nobody")
    assert bad.returncode == 1 and bad.stderr.strip() == "tickwarden: Give exactly one of --tenant TENANT or --platform."
    port = free_port()
    server = subprocess.Popen([str(BIN), "serve", "--port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "serve did not become ready"
            time.sleep(0.1)
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(base + "/api/me", headers=headers).json() == {"name": "alice", "role": "member",
                                                                       "tenant": "acme"}
        workflows = httpx.get(base + "/api/workflows", headers=headers).json()["items"]
        assert [w["name"] for w in workflows] == ["quickstart"]
        # the service's loops record heartbeats; the metrics show each of them running
        while "tickwarden_loop_stalled{" not in (text := httpx.get(base + "/metrics").text):
            assert time.monotonic() < deadline + 30, "no loop recorded a pass"
            time.sleep(0.2)
        assert "tickwarden_open_alerts" in text and "tickwarden_loops_stalled 0.0" in text
        token_id = next(t["id"] for t in listed if t["name"] == "alice")
        assert cli(env, "tokens", "revoke", str(token_id)).returncode == 0
        assert httpx.get(base + "/api/me", headers=headers).status_code == 401
    finally:
        server.terminate()
        server.wait(timeout=20)
