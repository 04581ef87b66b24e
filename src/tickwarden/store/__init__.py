"""The store: the only code that knows query names; everything else sees dataclasses.

One mixin per area, each with its own `.sql` file of named blocks:
catalog (tenants, workflows, schedules) and ledger (runs and attempts).
"""

from __future__ import annotations

from tickwarden.store.catalog import CatalogStore
from tickwarden.store.ledger import LedgerStore, TickRequest


class Store(CatalogStore, LedgerStore):
    """All store operations, bound to one connection and its transaction."""


__all__ = ["Store", "TickRequest"]
