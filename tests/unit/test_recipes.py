from datetime import UTC, datetime, timedelta

import pytest

from tickwarden import auth, secrets
from tickwarden.models import User
from tickwarden.recipes import RecipeError, parse_recipe


def step(name, *deps, **extra):
    return {"name": name, "kind": "python", "call": "pkg.mod:fn", "depends_on": list(deps), **extra}


def test_it_orders_steps_after_their_dependencies_keeping_file_order_for_ties():
    recipe = parse_recipe({"steps": [step("report", "join"), step("b"), step("join", "a", "b"), step("a")]})
    assert recipe.names == ["b", "a", "join", "report"]


@pytest.mark.parametrize(
    "raw, message",
    [
        ({}, "no list of steps"),
        ({"steps": []}, "no steps"),
        ({"steps": [step("a", "b"), step("b", "a")]}, "cycle"),
        ({"steps": [step("a", "zzz")]}, "unknown step 'zzz'"),
        ({"steps": [step("a"), step("a")]}, "declared twice"),
        ({"steps": [{"name": "a", "kind": "shell"}]}, "unknown kind"),
        ({"steps": [{"name": "a", "kind": "python", "call": "not a call"}]}, "package.module:function"),
        ({"steps": [{"name": "q", "kind": "sql", "query": "SELECT 1", "database": "postgres://x"}]}, "env:NAME"),
        ({"steps": [step("a", timeout_seconds=0)]}, "positive integer"),
    ],
)
def test_it_refuses_a_recipe_it_cannot_execute(raw, message):
    with pytest.raises(RecipeError, match=message):
        parse_recipe(raw)


def test_secrets_resolve_from_the_environment_and_are_scrubbed_with_their_password():
    url = "postgresql://app:s3cr3t-pass@db.internal:5432/sales"
    assert secrets.resolve("env:SALES_DB", {"SALES_DB": url}) == url
    text = f"could not connect to {url} (password s3cr3t-pass)"
    assert "s3cr3t-pass" not in secrets.scrub(text, [url])
    with pytest.raises(secrets.SecretError, match="env:MISSING"):
        secrets.resolve("env:MISSING", {})


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
