"""The first commands a new user runs work on a database nobody has migrated yet."""

import os
import subprocess
import sys
from pathlib import Path

from tests.dbutil import TEST_URL, drop_schema, make_schema

ROOT = Path(__file__).resolve().parents[2]


def test_apply_on_an_empty_database_migrates_it_first():
    schema = make_schema("first")
    try:
        env = {**os.environ, "TICKWARDEN_DATABASE_URL": TEST_URL, "TICKWARDEN_SCHEMA": schema}
        done = subprocess.run([sys.executable, "-m", "tickwarden.cli", "apply", str(ROOT / "examples" / "quickstart.yaml")],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        listed = subprocess.run([sys.executable, "-m", "tickwarden.cli", "workflows", "--json"],
                                capture_output=True, text=True, env=env, timeout=120)
        assert listed.returncode == 0 and "quickstart" in listed.stdout
    finally:
        drop_schema(schema)


def test_a_read_on_an_empty_database_says_what_to_do():
    schema = make_schema("first")
    try:
        env = {**os.environ, "TICKWARDEN_DATABASE_URL": TEST_URL, "TICKWARDEN_SCHEMA": schema}
        done = subprocess.run([sys.executable, "-m", "tickwarden.cli", "channels"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 1
        assert done.stderr.strip() == "tickwarden: this database has no tickwarden schema yet; run `tickwarden db upgrade` first."
    finally:
        drop_schema(schema)
