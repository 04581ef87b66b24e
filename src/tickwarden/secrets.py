"""Secrets: a tenant's own credentials, sealed at rest, reachable only by that tenant's runs.

Two kinds of reference, never interchangeable:

- `secret:NAME` is a secret of the tenant that publishes the resource (a sql step's
  `database`, a python step's `secrets`, a channel's `secret_ref`). Its value is stored
  in `tenant_secrets`, encrypted with AES-256-GCM under a key derived (HKDF-SHA256)
  from the platform key; the tenant id and the name are bound in as associated data,
  so a ciphertext copied to another tenant or name does not decrypt.
- `env:NAME` is the platform's own configuration (its database, platform channels).
  A tenant resource may use it only when the platform maps that name to that tenant
  in `TICKWARDEN_TENANT_ENV` (`tenant:NAME,…`); otherwise publishing it is refused,
  because any variable of the worker (the database URL, the signing key) would be
  one reference away from every tenant.

Values are resolved at the last moment, handed only to the step that declared them,
and scrubbed from every text that leaves the step, on top of `sanitize`'s redaction.
Rotation: set the new key as `TICKWARDEN_SECRET_KEY`, list the previous ones in
`TICKWARDEN_SECRET_KEYS_OLD` (comma-separated), run `tickwarden secrets rotate`, then
drop the old keys. Every key in the ring decrypts; only the current one encrypts.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets as random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tickwarden.errors import InvalidInput, NotFound, TickwardenError
from tickwarden.models import SealedSecret, SecretInfo

if TYPE_CHECKING:
    from tickwarden.auth import RunKey
    from tickwarden.db import Database
    from tickwarden.models import Channel
    from tickwarden.store import Store

SCRUBBED = "[secret]"
OLD_KEYS_ENV = "TICKWARDEN_SECRET_KEYS_OLD"
TENANT_ENV = "TICKWARDEN_TENANT_ENV"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
TENANT_REF = re.compile(r"^secret:([A-Za-z_][A-Za-z0-9_]{0,63})$")
PLATFORM_REF = re.compile(r"^env:([A-Za-z_][A-Za-z0-9_]*)$")
MAX_VALUE_BYTES = 65536
ROTATE_BATCH = 200
_NONCE = 12


class SecretError(TickwardenError):
    """A secret reference cannot be resolved."""


def migration_hint(ref: str) -> str:
    """The one sentence that tells a publisher how to replace a refused `env:` reference."""
    name = ref.split(":", 1)[1] if ":" in ref else ref
    return (f"'{ref}' names a variable of the platform, which tenant resources may not use: store the value with "
            f"`tickwarden secrets set TENANT {name}` and refer to it as 'secret:{name}'")


def platform_env_allowed(tenant: str, environ: Mapping[str, str] | None = None) -> set[str]:
    """Return the `env:` names the platform maps for a tenant in TICKWARDEN_TENANT_ENV."""
    raw = (os.environ if environ is None else environ).get(TENANT_ENV, "")
    allowed = set()
    for entry in raw.split(","):
        owner, _, name = entry.strip().partition(":")
        if owner == tenant and NAME.match(name):
            allowed.add(name)
    return allowed


def platform_variable(ref: str) -> str | None:
    """The variable an `env:NAME` reference names; None when `ref` is not one. The one parser of `env:`."""
    match = PLATFORM_REF.match(ref)
    return match.group(1) if match else None


def check_tenant_reference(ref: str, tenant: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a reference a tenant may not publish; the message never repeats a non-reference value."""
    if TENANT_REF.match(ref):
        return
    platform = platform_variable(ref)
    if platform is not None:
        if platform in platform_env_allowed(tenant, environ):
            return
        raise SecretError(migration_hint(ref))
    raise SecretError("not a secret reference such as 'secret:NAME' (the value is not shown)")


# -- keys ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    id: str
    aead: AESGCM


def derive_key(platform_key: str) -> Key:
    """Derive the secret store's encryption key (and its public id) from a platform key."""
    material = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"tickwarden.secrets",
                    info=b"tenant secrets v1").derive(platform_key.encode())
    key_id = hashlib.sha256(b"tickwarden key id\0" + material).hexdigest()[:16]
    return Key(key_id, AESGCM(material))


class Keyring:
    """The current key (seals) and the old ones (still open what they sealed)."""

    def __init__(self, current: str, old: Iterable[str] = ()):
        self.current = derive_key(current)
        self._keys = {self.current.id: self.current}
        for key in old:
            derived = derive_key(key)
            self._keys.setdefault(derived.id, derived)

    @staticmethod
    def old_keys(environ: Mapping[str, str] | None = None) -> list[str]:
        env = os.environ if environ is None else environ
        return [k.strip() for k in env.get(OLD_KEYS_ENV, "").split(",") if k.strip()]

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Keyring:
        from tickwarden import auth

        return cls(auth.secret_key(), cls.old_keys(environ))

    def seal(self, tenant_id: int, name: str, value: str) -> tuple[str, bytes]:
        nonce = random.token_bytes(_NONCE)
        return self.current.id, nonce + self.current.aead.encrypt(nonce, value.encode(), _aad(tenant_id, name))

    def open(self, sealed: SealedSecret) -> str:
        key = self._keys.get(sealed.key_id)
        if key is None:
            raise SecretError(f"secret:{sealed.name} was sealed with a key this worker does not have; "
                              f"list the previous platform key in {OLD_KEYS_ENV}")
        data = sealed.ciphertext
        try:
            return key.aead.decrypt(data[:_NONCE], data[_NONCE:], _aad(sealed.tenant_id, sealed.name)).decode()
        except (InvalidTag, ValueError):
            raise SecretError(f"secret:{sealed.name} does not decrypt: it was altered or moved") from None


def _aad(tenant_id: int, name: str) -> bytes:
    return f"tickwarden-secret\0{int(tenant_id)}\0{name}".encode()


# -- the one owner of every secret write -------------------------------------------------


def check_name(name: str) -> str:
    if not NAME.match(name or ""):
        raise InvalidInput("A secret name is a letter or underscore followed by up to 63 letters, digits or "
                           "underscores.")
    return name


def check_value(value: str) -> str:
    if not value:
        raise InvalidInput("The secret value is empty.")
    try:
        size = len(value.encode())
    except UnicodeEncodeError:  # a lone surrogate, from a JSON escape: not text UTF-8 can hold
        raise InvalidInput("The secret value contains a lone surrogate, which is not valid Unicode.") from None
    if size > MAX_VALUE_BYTES:
        raise InvalidInput(f"The secret value is larger than {MAX_VALUE_BYTES} bytes.")
    if "\0" in value:
        raise InvalidInput("The secret value contains a NUL character.")
    return value


def set_secret(store: Store, keyring: Keyring, tenant_id: int, name: str, value: str, now: datetime) -> SecretInfo:
    """Seal and store a tenant's secret (a new value replaces the old one)."""
    check_name(name)
    check_value(value)
    key_id, ciphertext = keyring.seal(tenant_id, name, value)
    return store.secrets.upsert_secret(tenant_id, name, key_id, ciphertext, now)


def delete_secret(store: Store, tenant_id: int, name: str) -> None:
    check_name(name)
    if not store.secrets.delete_secret(tenant_id, name):
        raise NotFound(f"No secret named {name!r}.")


def rotate(db: Database, keyring: Keyring) -> int:
    """Re-seal every secret not under the current key, in batches; return how many changed.

    Rows are claimed with SKIP LOCKED and re-sealed compare-and-set, so several
    rotations (or a rotation racing `secrets set`) re-seal each row at most once.
    """
    changed = 0
    while True:
        with db.transaction() as store:
            batch = store.secrets.claim_secrets_for_rotation(keyring.current.id, ROTATE_BATCH)
            for sealed in batch:
                value = keyring.open(sealed)
                key_id, ciphertext = keyring.seal(sealed.tenant_id, sealed.name, value)
                changed += store.secrets.reseal_secret(sealed, key_id, ciphertext)
        if len(batch) < ROTATE_BATCH:
            return changed


def resolve(store: Store | None, keyring: Keyring, tenant_id: int, tenant: str, refs: Iterable[str],
            environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the value of each reference a run of `tenant` declared; raise SecretError naming the first missing.

    The check of `check_tenant_reference` is repeated here: a stored recipe may
    predate it, or have been written by hand.
    """
    refs = sorted(set(refs))
    for ref in refs:
        check_tenant_reference(ref, tenant, environ)
    names = [TENANT_REF.match(r).group(1) for r in refs if TENANT_REF.match(r)]  # type: ignore[union-attr]
    found = {s.name: keyring.open(s) for s in store.secrets.sealed_secrets(tenant_id, names)} if names and store else {}
    values: dict[str, str] = {}
    env = os.environ if environ is None else environ
    for ref in refs:
        kind, name = ref.split(":", 1)
        value = found.get(name) if kind == "secret" else env.get(name)
        if not value:
            # The reference is named as NAME, never as `secret:NAME`: redaction would take it for a value.
            raise SecretError(f"tenant {tenant} has no secret named {name}: set it with "
                              f"`tickwarden secrets set {tenant} {name}`"
                              if kind == "secret" else f"the platform variable {name} mapped for {tenant} is not set")
        values[ref] = value
    return values


# -- scrubbing -----------------------------------------------------------------------------


def sensitive_parts(value: str) -> list[str]:
    """Return the value and the pieces of it that must never appear in text (a URL's password)."""
    parts = [value]
    try:
        split = urlsplit(value)
        if split.password:
            parts += [split.password, unquote(split.password)]
        if split.username and split.password:
            parts.append(f"{split.username}:{split.password}")
    except ValueError:
        pass
    # A multi-line value (a key file) leaks line by line as well as whole.
    parts += [line.strip() for line in value.splitlines() if len(line.strip()) >= 8]
    # longest first, so a part that contains another is replaced whole
    return sorted({p for p in parts if len(p) >= 4}, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of a secret (or a sensitive part of it) in `text`."""
    parts = sorted({p for s in secrets for p in sensitive_parts(s)}, key=len, reverse=True)
    for part in parts:
        text = text.replace(part, SCRUBBED)
    return text


# -- the handoff to a run ------------------------------------------------------------------


@dataclass(frozen=True)
class Handoff:
    """What one attempt's steps are given: resolved references, the run's own variables, and
    the identity of the platform's database (which a sql step must not run on)."""

    values: dict[str, str]
    run_environment: dict[str, str]
    platform_database: str | None

    @property
    def sensitive(self) -> list[str]:
        return list(self.values.values()) + [self.run_environment.get("TICKWARDEN_RUN_CREDENTIAL", "")]

    def step_environment(self, refs: Iterable[str]) -> dict[str, str]:
        """The variables a python step sees: its declared secrets by name, and the run's own."""
        declared = {ref.split(":", 1)[1]: self.values[ref] for ref in refs}
        return {**declared, **self.run_environment}


def prepare(store: Store | None, keyring: Keyring, *, tenant_id: int, run_id: int, attempt: int,
            refs: Iterable[str], publisher: str, has_sql: bool, now: datetime, signing_key: str,
            environ: Mapping[str, str] | None = None, run: RunKey | None = None) -> Handoff:
    """Resolve an attempt's secrets and issue its run credential, in the caller's transaction.

    `run`, when the caller already knows the run key (the worker's lease and execution
    context carry its names), saves a look-up; `store` may then be None when there
    is nothing to read either (no tenant secret to open, no sql step), so an attempt
    that needs no secret costs no transaction of its own.
    """
    from tickwarden import auth

    refs = list(refs)
    if store is None and (run is None or has_sql or any(TENANT_REF.match(r) for r in refs)):
        raise ValueError("prepare needs a store to read the run's identity, secrets or platform identity")
    if run is None:
        assert store is not None
        names = store.secrets.run_identity(run_id, tenant_id)
        if names is None:
            raise SecretError("the run no longer exists")
        run = auth.RunKey(*names, attempt, publisher)
    values = resolve(store, keyring, tenant_id, run.tenant, refs, environ)
    run_environment = {
        "TICKWARDEN_TENANT": run.tenant,
        "TICKWARDEN_WORKFLOW": run.workflow,
        "TICKWARDEN_SCHEDULED_FOR": run.idempotency_key.rsplit("/", 1)[1],
        "TICKWARDEN_ATTEMPT": str(attempt),
        "TICKWARDEN_RUN_KEY": run.idempotency_key,
        "TICKWARDEN_RUN_CREDENTIAL": auth.issue_run_credential(run, now, signing_key),
    }
    return Handoff(values, run_environment, store.secrets.platform_identity() if has_sql and store is not None else None)


def channel_secret(db: Database, channel: Channel) -> str | None:
    """Return the value of a tenant channel's `secret:NAME`; None for no reference or an `env:` one.

    Read in the channel's tenant context, so row-level security is a second fence
    around a lookup that is already scoped to one tenant. A missing secret is a
    SecretError naming the channel, which the notifier treats as permanent (no
    retry fixes it); transports import this module, so it imports none of theirs.
    """
    ref = channel.secret_ref
    if not ref or not ref.startswith("secret:") or channel.tenant_id is None:
        return None
    try:
        with db.transaction() as store:
            store.api.enter_tenant_context(channel.tenant_id, platform=False)
            return resolve(store, Keyring.from_environment(), channel.tenant_id, channel.tenant or "", [ref])[ref]
    except SecretError as exc:
        raise SecretError(f"channel {channel.label}: {exc.message}") from None
