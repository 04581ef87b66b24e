from datetime import UTC, datetime, timedelta

import pytest

from tickwarden import auth
from tickwarden.models import User

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


def user(active=True, tenant_id=1):
    return User(id=7, tenant_id=tenant_id, email="a@b.test", display_name="a", active=active, created_at=NOW)


def test_a_credential_verifies_within_its_lifetime_and_expires_after_it():
    token = auth.issue(auth.Identity(7, 1), NOW, "k")
    assert auth.verify(token, NOW + timedelta(seconds=60), "k") == auth.Identity(7, 1)
    with pytest.raises(auth.AuthError, match="expired"):
        auth.verify(token, NOW + timedelta(seconds=auth.CREDENTIAL_SECONDS + 5), "k")
    with pytest.raises(auth.AuthError, match="signed"):
        auth.verify(token, NOW, "another key")


def test_authentication_refuses_deactivated_missing_and_foreign_publishers():
    assert auth.authenticate(user(), 1, NOW, "k") == auth.Identity(7, 1)
    for publisher, tenant in ((user(active=False), 1), (None, 1), (user(tenant_id=2), 1)):
        with pytest.raises(auth.AuthError):
            auth.authenticate(publisher, tenant, NOW, "k")


def test_a_generated_signing_key_is_created_once_and_private(tmp_path, monkeypatch):
    monkeypatch.delenv(auth.SECRET_ENV, raising=False)
    first = auth.secret_key(tmp_path)
    assert auth.secret_key(tmp_path) == first and len(first) >= 32
    assert (tmp_path / auth.KEY_FILE).stat().st_mode & 0o077 == 0
