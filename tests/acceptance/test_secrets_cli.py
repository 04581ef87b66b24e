"""`tickwarden secrets` through the real CLI: values go in by stdin or file and never come out."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.dbutil import TEST_URL
from tickwarden import secrets

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
CANARY = "CANARY-cli-secret-7731"


@pytest.fixture
def cli(schema, tmp_path):
    env = {**os.environ, "TICKWARDEN_DATABASE_URL": f"{TEST_URL}?options=-c%20search_path%3D{schema}",
           "TICKWARDEN_DATA_DIR": str(tmp_path), "COLUMNS": "220", "TICKWARDEN_SECRET_KEY": "key-one"}
    env.pop("TICKWARDEN_SECRET_KEYS_OLD", None)

    def run(*args, stdin="", **extra):
        return subprocess.run([str(BIN), *args], cwd=ROOT, env={**env, **extra}, input=stdin, capture_output=True, check=False,
                              text=True, timeout=60)

    return run


def sealed(db, tenant_id):
    with db.transaction() as store:
        return store.secrets.sealed_secrets(tenant_id, ["WAREHOUSE"])[0]


def test_a_secret_is_set_from_stdin_listed_by_name_and_deleted(cli, db, clock):
    with db.transaction() as store:
        tenant = store.catalog.upsert_tenant("acme", clock.now())
    done = cli("secrets", "set", "acme", "WAREHOUSE", stdin=CANARY + "\n")
    assert done.returncode == 0, done.stderr
    row = sealed(db, tenant.id)
    assert secrets.Keyring("key-one").open(row) == CANARY  # the trailing newline is not part of it
    with db.connection() as conn:
        assert CANARY.encode() not in bytes(conn.execute("SELECT ciphertext FROM tenant_secrets").fetchone()[0])
    listed = cli("secrets", "list", "acme", "--json")
    assert json.loads(listed.stdout)[0]["reference"] == "secret:WAREHOUSE"
    assert CANARY not in listed.stdout + listed.stderr + done.stdout + done.stderr
    assert cli("secrets", "delete", "acme", "WAREHOUSE").returncode == 0
    gone = cli("secrets", "delete", "acme", "WAREHOUSE")
    assert gone.returncode == 1 and gone.stderr.strip() == "tickwarden: No secret named 'WAREHOUSE'."


def test_a_secret_is_read_from_a_file(cli, db, clock, tmp_path):
    with db.transaction() as store:
        tenant = store.catalog.upsert_tenant("acme", clock.now())
    path = tmp_path / "value"
    path.write_text(CANARY)
    assert cli("secrets", "set", "acme", "WAREHOUSE", "--file", str(path)).returncode == 0
    assert secrets.Keyring("key-one").open(sealed(db, tenant.id)) == CANARY


@pytest.mark.parametrize(("args", "stdin", "code", "message"), [
    # no value on the command line: a usage error (its exit status is the CLI's, for every usage error)
    (("secrets", "set", "acme", "WAREHOUSE", CANARY), "", 2, "never as an argument"),
    (("secrets", "set", "acme", "WAREHOUSE"), "", 1, "The secret value is empty."),
    (("secrets", "set", "acme", "bad-name"), CANARY, 1, "A secret name is"),
    (("secrets", "set", "nobody", "WAREHOUSE"), CANARY, 1, "No tenant named 'nobody'."),
])
def test_it_refuses_bad_input_with_one_sentence(cli, db, clock, args, stdin, code, message):
    with db.transaction() as store:
        store.catalog.upsert_tenant("acme", clock.now())
    done = cli(*args, stdin=stdin)
    assert done.returncode == code if code else done.returncode != 0
    assert "Traceback" not in done.stderr and message in done.stderr and CANARY not in done.stderr + done.stdout
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM tenant_secrets").fetchone()[0] == 0


def test_rotation_reseals_every_secret_under_the_new_key(cli, db, clock):
    with db.transaction() as store:
        tenant = store.catalog.upsert_tenant("acme", clock.now())
    assert cli("secrets", "set", "acme", "WAREHOUSE", stdin=CANARY).returncode == 0
    before = sealed(db, tenant.id)
    rotated = cli("secrets", "rotate", TICKWARDEN_SECRET_KEY="key-two", TICKWARDEN_SECRET_KEYS_OLD="key-one")
    assert rotated.returncode == 0, rotated.stderr and "re-encrypted 1" in rotated.stdout
    after = sealed(db, tenant.id)
    assert after.key_id != before.key_id and secrets.Keyring("key-two").open(after) == CANARY
    with pytest.raises(secrets.SecretError):
        secrets.Keyring("key-one").open(after)
    again = cli("secrets", "rotate", TICKWARDEN_SECRET_KEY="key-two", TICKWARDEN_SECRET_KEYS_OLD="key-one")
    assert "re-encrypted 0" in again.stdout
