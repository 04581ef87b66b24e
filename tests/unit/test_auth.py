from datetime import UTC, datetime, timedelta

import pytest

from tickwarden import auth
from tickwarden.models import User

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)


def user(active=True, tenant_id=1):
    return User(id=7, tenant_id=tenant_id, email="a@b.test", display_name="a", active=active, created_at=NOW)


RUN = auth.RunKey("acme", "nightly", NOW, 2, "ops@acme.test")


def test_a_run_credential_verifies_within_its_lifetime_and_expires_after_it():
    token = auth.issue_run_credential(RUN, NOW, "k")
    assert auth.verify_run_credential(token, NOW + timedelta(seconds=60), "k")["attempt"] == 2
    with pytest.raises(auth.AuthError, match="expired"):
        auth.verify_run_credential(token, NOW + timedelta(seconds=auth.CREDENTIAL_SECONDS + 5), "k")
    with pytest.raises(auth.AuthError, match="signed"):
        auth.verify_run_credential(token, NOW, "another key")


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

    for key in ("k", "a longer platform key ünïcode"):
        run_token = auth.issue_run_credential(RUN, NOW, key)
        assert Fixed(key, salt=auth.RUN_SALT).unsign(run_token, max_age=60).decode().startswith('{"attempt":2,')
        payload = run_token.rsplit(".", 2)[0]
        assert run_token == Fixed(key, salt=auth.RUN_SALT).sign(payload).decode()
        assert auth.verify_run_credential(run_token, NOW, key)["publisher"] == "ops@acme.test"


def test_a_run_credential_verifies_under_any_key_of_a_rotation_and_no_other():
    run = auth.RunKey("acme", "nightly", NOW, 1, "ops@acme.test")
    old = auth.issue_run_credential(run, NOW, "old")
    assert auth.verify_run_credential(old, NOW, ["current", "old"])["tenant"] == "acme"
    for keys in ("current", ["current"], [], ["current", "older"]):
        with pytest.raises(auth.AuthError, match="not validly signed"):
            auth.verify_run_credential(old, NOW, keys)
    # A token signed under another salt (another purpose of the same key) is not a run credential.
    from itsdangerous import TimestampSigner

    other = TimestampSigner("old", salt="tickwarden.other").sign(old.rsplit(".", 2)[0]).decode()
    with pytest.raises(auth.AuthError, match="not validly signed"):
        auth.verify_run_credential(other, NOW, "old")


def test_a_credential_stamped_after_now_or_altered_anywhere_is_refused():
    token = auth.issue_run_credential(RUN, NOW + timedelta(seconds=5), "k")
    with pytest.raises(auth.AuthError, match="expired"):
        auth.verify_run_credential(token, NOW, "k")
    good = auth.issue_run_credential(RUN, NOW, "k")
    payload, stamp, signature = good.rsplit(".", 2)
    flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    forged = payload.replace('"attempt":2', '"attempt":3')
    assert forged != payload
    for bad in (f"{payload}.{stamp}.{flipped}", f"{forged}.{stamp}.{signature}", f"{payload}.{signature}",
                "", ".", "..", "no-dots", f"{payload}.{stamp}.{signature}é", f"{payload}.AAAAAAAAAAAAAAAA.{signature}"):
        with pytest.raises(auth.AuthError, match="not validly signed"):
            auth.verify_run_credential(bad, NOW, "k")
