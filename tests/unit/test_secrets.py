import pytest

from tickwarden import secrets


def test_secrets_resolve_from_the_environment_and_are_scrubbed_with_their_password():
    url = "postgresql://app:s3cr3t-pass@db.internal:5432/sales"
    assert secrets.resolve("env:SALES_DB", {"SALES_DB": url}) == url
    text = f"could not connect to {url} (password s3cr3t-pass)"
    assert "s3cr3t-pass" not in secrets.scrub(text, [url])
    with pytest.raises(secrets.SecretError, match="env:MISSING"):
        secrets.resolve("env:MISSING", {})
