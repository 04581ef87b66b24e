"""Secret references: how a recipe names a credential without containing it.

A reference looks like `env:NAME`: the value is the environment variable NAME of
the worker that executes the step. Values are resolved at the last moment, handed
only to the step that needs them, and scrubbed from every text that leaves the
step (logs, errors, outputs), on top of the general redaction in `sanitize`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from urllib.parse import unquote, urlsplit

from tickwarden.recipes import SECRET_REF

SCRUBBED = "[secret]"


class SecretError(Exception):
    """A secret reference cannot be resolved."""


def resolve(reference: str, environ: Mapping[str, str] | None = None) -> str:
    """Return the value a reference names, or raise SecretError (which names only the reference)."""
    if not SECRET_REF.match(reference or ""):
        raise SecretError(f"unknown secret reference {reference}: use env:NAME")
    name = reference.split(":", 1)[1]
    value = (os.environ if environ is None else environ).get(name)
    if not value:
        raise SecretError(f"no such secret {reference}: the worker has no environment variable {name}")
    return value


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
    # longest first, so a part that contains another is replaced whole
    return sorted({p for p in parts if len(p) >= 4}, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of a secret (or a sensitive part of it) in `text`."""
    for secret in secrets:
        for part in sensitive_parts(secret):
            text = text.replace(part, SCRUBBED)
    return text
