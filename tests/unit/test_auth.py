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
    assert auth.authenticate(user(), 1) == auth.Identity(7, 1)
    for publisher, tenant in ((user(active=False), 1), (None, 1), (user(tenant_id=2), 1)):
        with pytest.raises(auth.AuthError):
            auth.authenticate(publisher, tenant)


def test_a_generated_signing_key_is_created_once_and_private(tmp_path, monkeypatch):
    monkeypatch.delenv(auth.SECRET_ENV, raising=False)
    first = auth.secret_key(tmp_path)
    assert auth.secret_key(tmp_path) == first and len(first) >= 32
    assert (tmp_path / auth.KEY_FILE).stat().st_mode & 0o077 == 0


def test_credentials_are_itsdangerous_timestamp_tokens_byte_for_byte_both_ways():
    # Signed without itsdangerous' per-call signer, the tokens must not change: one issued by an
    # older worker, or verified by an older replica, reads the same.
    from itsdangerous import TimestampSigner

    class Fixed(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(NOW.timestamp())

    run = auth.RunKey("acme", "nightly", NOW, 2, "ops@acme.test")
    for key in ("k", "a longer platform key ünïcode"):
        ours = auth.issue(auth.Identity(7, 1), NOW, key)
        theirs = Fixed(key, salt=auth.SALT).sign('{"u":7,"t":1}').decode()
        assert ours == theirs
        run_token = auth.issue_run_credential(run, NOW, key)
        assert Fixed(key, salt=auth.RUN_SALT).unsign(run_token, max_age=60).decode().startswith('{"attempt":2,')
        payload = run_token.rsplit(".", 2)[0]
        assert run_token == Fixed(key, salt=auth.RUN_SALT).sign(payload).decode()
        assert auth.verify(theirs, NOW, key) == auth.Identity(7, 1)


def test_a_run_credential_verifies_under_any_key_of_a_rotation_and_no_other():
    run = auth.RunKey("acme", "nightly", NOW, 1, "ops@acme.test")
    old = auth.issue_run_credential(run, NOW, "old")
    assert auth.verify_run_credential(old, NOW, ["current", "old"])["tenant"] == "acme"
    for keys in ("current", ["current"], [], ["current", "older"]):
        with pytest.raises(auth.AuthError, match="not validly signed"):
            auth.verify_run_credential(old, NOW, keys)
    # A publisher credential is not a run credential: the salts keep them apart.
    with pytest.raises(auth.AuthError, match="not validly signed"):
        auth.verify_run_credential(auth.issue(auth.Identity(7, 1), NOW, "old"), NOW, "old")


def test_a_credential_stamped_after_now_or_altered_anywhere_is_refused():
    token = auth.issue(auth.Identity(7, 1), NOW + timedelta(seconds=5), "k")
    with pytest.raises(auth.AuthError, match="expired"):
        auth.verify(token, NOW, "k")
    good = auth.issue(auth.Identity(7, 1), NOW, "k")
    payload, stamp, signature = good.split(".")
    flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    for bad in (f"{payload}.{stamp}.{flipped}", f'{{"u":8,"t":1}}.{stamp}.{signature}', f"{payload}.{signature}",
                "", ".", "..", "no-dots", f"{payload}.{stamp}.{signature}é", f"{payload}.AAAAAAAAAAAAAAAA.{signature}"):
        with pytest.raises(auth.AuthError, match="not validly signed"):
            auth.verify(bad, NOW, "k")
