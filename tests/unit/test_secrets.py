import pytest

from tickwarden import secrets
from tickwarden.models import SealedSecret


def test_a_url_secret_is_scrubbed_whole_and_by_its_password():
    url = "postgresql://app:s3cr3t-pass@db.internal:5432/sales"
    text = f"could not connect to {url} (password s3cr3t-pass)"
    scrubbed = secrets.scrub(text, [url])
    assert "s3cr3t-pass" not in scrubbed and "db.internal" not in scrubbed


def test_a_multi_line_secret_is_scrubbed_line_by_line():
    key = "-----BEGIN KEY-----\nAAAAcanaryLINEone\nBBBBcanaryLINEtwo\n-----END KEY-----"
    assert "canaryLINEtwo" not in secrets.scrub("read BBBBcanaryLINEtwo from file", [key])


def test_a_sealed_value_opens_only_for_its_own_tenant_and_name():
    ring = secrets.Keyring("platform-key")
    key_id, sealed = ring.seal(2, "DB", "postgres://b")
    assert ring.open(SealedSecret(2, "DB", key_id, sealed)) == "postgres://b"
    assert b"postgres://b" not in sealed
    for tenant, name in ((1, "DB"), (2, "OTHER")):
        with pytest.raises(secrets.SecretError, match="altered or moved"):
            ring.open(SealedSecret(tenant, name, key_id, sealed))


def test_it_refuses_to_open_a_value_sealed_with_an_unknown_key():
    key_id, sealed = secrets.Keyring("old").seal(1, "X", "v")
    with pytest.raises(secrets.SecretError, match="TICKWARDEN_SECRET_KEYS_OLD"):
        secrets.Keyring("new").open(SealedSecret(1, "X", key_id, sealed))


def test_old_keys_still_open_what_they_sealed_while_the_current_key_seals():
    old_id, sealed = secrets.Keyring("old").seal(1, "X", "v")
    ring = secrets.Keyring("new", ["old"])
    assert ring.open(SealedSecret(1, "X", old_id, sealed)) == "v"
    assert ring.seal(1, "X", "v")[0] == secrets.Keyring("new").current.id != old_id


@pytest.mark.parametrize("ref", ["env:TICKWARDEN_DATABASE_URL", "env:TICKWARDEN_SECRET_KEY", "env:HOME"])
def test_it_refuses_a_platform_variable_in_a_tenant_resource_saying_how_to_migrate(ref):
    with pytest.raises(secrets.SecretError, match=r"tickwarden secrets set TENANT .* 'secret:"):
        secrets.check_tenant_reference(ref, "beta", {})


def test_a_platform_mapping_allows_one_name_for_one_tenant_only():
    environ = {"TICKWARDEN_TENANT_ENV": "acme:ACME_DB, beta:BETA_TOKEN"}
    secrets.check_tenant_reference("env:ACME_DB", "acme", environ)
    with pytest.raises(secrets.SecretError):
        secrets.check_tenant_reference("env:ACME_DB", "beta", environ)


def test_a_pasted_value_is_refused_without_being_repeated():
    with pytest.raises(secrets.SecretError) as refused:
        secrets.check_tenant_reference("postgres://u:hunter2@h/db", "acme", {})
    assert "hunter2" not in refused.value.message
