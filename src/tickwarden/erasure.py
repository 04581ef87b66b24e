"""Erasure (GDPR art. 17): everything of a tenant, or every trace of one person.

`erase_tenant` deletes every row of a tenant from every table that has a
`tenant_id` column (found in the catalog, so a table added later is covered
without a change here), referencing tables first, then the tenant itself.

`erase_subject` finds a person by address:

1. their publisher rows (`users`) stay, because workflows point at them, but lose
   the address and the name: an `erased-<id>@erased.invalid` address, the name
   `erased`, inactive;
2. every other text and json column of every table is searched for the address
   and, in rows of the person's own tenants (and rows of no tenant), for the names
   those rows carried; each occurrence becomes `[erased]` (an
   address that is a whole element of a json list, such as an email channel's
   recipients, is removed from the list). Columns governed by a CHECK constraint
   (names, statuses, categories) are not rewritten: they cannot hold an address,
   and a person's name must never rewrite an identifier.

Both run in one transaction, so an erasure is whole or nothing; `dry_run` reports
the same counts and writes nothing. A real erasure records one row in
`erasure_audits`: the kind, the tenant's id (never a name or address), who asked,
when, and how many rows of each table (and column) it changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tickwarden.errors import InvalidInput, NotFound
from tickwarden.store import Store
from tickwarden.store.erasure import TextColumns

EMAIL = re.compile(r"^[^@\s]{1,128}@[^@\s]{1,253}$")
REPLACEMENT = "[erased]"
# Shorter names are not searched for: two letters match too much that is not the person.
MIN_NAME_LENGTH = 3


@dataclass(frozen=True)
class ErasureReport:
    """What an erasure removed (or, in a dry run, would remove): rows per table and column."""

    kind: str
    dry_run: bool
    counts: dict[str, int] = field(default_factory=dict)
    audit_id: int | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "dry_run": self.dry_run, "total": self.total, "counts": self.counts,
                "audit_id": self.audit_id}


def parse_subject(email: str) -> str:
    """Return the address to erase, or raise InvalidInput with one sentence."""
    address = (email or "").strip()
    if not EMAIL.match(address):
        raise InvalidInput("The subject must be an email address such as 'person@example.com'.")
    return address


def erase_tenant(store: Store, tenant: str, *, actor: str, now: datetime, dry_run: bool = False) -> ErasureReport:
    """Delete every row of a tenant, referencing tables first; record the audit unless `dry_run`."""
    found = store.catalog.get_tenant_by_name(tenant)
    if found is None:
        raise NotFound(f"No tenant named {tenant!r}.")
    tables = store.erasure.tenant_tables()
    counts = {table: n for table in _referencing_first(tables)
              if (n := store.erasure.count_tenant_rows(table, found.id))}
    counts["tenants"] = 1
    if dry_run:
        return ErasureReport("tenant", True, counts)
    delete_tenant(store, found.id, tables)
    audit = store.erasure.record_audit(kind="tenant", target=f"tenant {found.id}", actor=actor, at=now,
                                       counts=counts)
    return ErasureReport("tenant", False, counts, audit.id)


def delete_tenant(store: Store, tenant_id: int, tables: dict[str, list[str]] | None = None) -> None:
    """Delete every row of a tenant, referencing tables first, then the tenant itself (no audit)."""
    tables = store.erasure.tenant_tables() if tables is None else tables
    for table in _referencing_first(tables):
        store.erasure.delete_tenant_rows(table, tenant_id)
    store.erasure.delete_tenant(tenant_id)


def _referencing_first(tables: dict[str, list[str]]) -> list[str]:
    """Order tables so that each comes before every table it references (a depth-first sort)."""
    ordered: list[str] = []
    done: set[str] = set()

    def visit(table: str, path: frozenset[str]) -> None:
        if table in done or table in path:
            return
        # Everything that references `table` must be emptied before it.
        for other in sorted(tables):
            if table in tables[other] and other != table:
                visit(other, path | {table})
        done.add(table)
        ordered.append(table)

    for table in sorted(tables):
        visit(table, frozenset())
    return ordered


def erase_subject(store: Store, email: str, *, actor: str, now: datetime, dry_run: bool = False) -> ErasureReport:
    """Remove a person's address and name from every table; record the audit unless `dry_run`."""
    address = parse_subject(email)
    users = store.erasure.find_users(address)
    names = sorted({u.display_name.strip() for u in users
                    if len(u.display_name.strip()) >= MIN_NAME_LENGTH and u.display_name.strip().lower()
                    != address.lower()}, key=len, reverse=True)
    counts: dict[str, int] = {}
    if users:
        counts["users"] = len(users) if dry_run else store.erasure.anonymise_users(address)
    tenant_ids = sorted({u.tenant_id for u in users})
    everywhere, with_names = _Scrubber(address, []), _Scrubber(address, names)
    for target in store.erasure.text_columns():
        if target.table == "users":
            # Publisher rows are anonymised whole, above (in a dry run: would be).
            target = _without(target, ("email", "display_name"))
            if not target.columns:
                continue
        for mention in store.erasure.find_mentions(target, address, names, tenant_ids):
            # A name identifies the person only among their own tenants (or in rows of no tenant).
            own = target.tenant_column is None or mention.tenant_id in tenant_ids
            scrub = with_names if own else everywhere
            changed = {column: new for column, value in mention.values.items()
                       if (new := scrub.value(value)) != value}
            if not changed:
                continue  # the needle was there only in a form the word rules leave alone
            for column in changed:
                key = f"{target.table}.{column}"
                counts[key] = counts.get(key, 0) + 1
            if not dry_run:
                store.erasure.rewrite_row(target, mention.row_ref, changed)
    if dry_run:
        return ErasureReport("subject", True, counts)
    audit = store.erasure.record_audit(kind="subject", target="subject", actor=actor, at=now, counts=counts)
    return ErasureReport("subject", False, counts, audit.id)


def _without(target: TextColumns, columns: tuple[str, ...]) -> TextColumns:
    kept = [(c, t) for c, t in zip(target.columns, target.types, strict=True) if c not in columns]
    return TextColumns(target.table, tuple(c for c, _ in kept), tuple(t for _, t in kept), target.tenant_column)


class _Scrubber:
    """Rewrites text and json values without the address and names, case-insensitively."""

    def __init__(self, address: str, names: list[str]):
        self.address = address.lower()
        # An address is matched whole: not as the tail of a longer one (xalice@… is someone else).
        parts = [rf"(?<![\w.+-]){re.escape(address)}(?![\w-]|\.\w)"]
        parts += [rf"(?<!\w){re.escape(name)}(?!\w)" for name in names]
        self.pattern = re.compile("|".join(parts), re.IGNORECASE)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.pattern.sub(REPLACEMENT, value)
        if isinstance(value, list):
            return [self.value(v) for v in value if not (isinstance(v, str) and v.strip().lower() == self.address)]
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        return value
