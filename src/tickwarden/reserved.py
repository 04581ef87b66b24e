"""Names tenants cannot take: the self-test's synthetic tenants.

A self-test's messages travel the real routes marked as a test, and its rows are
removed by tenant afterwards; both are keyed by the tenant's name, so no tenant may
publish a name that looks like one.
"""

from __future__ import annotations

SELFTEST_TENANT_PREFIX = "tickwarden-selftest"


def is_selftest_tenant(name: str | None) -> bool:
    """Return whether `name` is (or would pass for) a self-test's synthetic tenant."""
    return bool(name) and str(name).lower().startswith(SELFTEST_TENANT_PREFIX)
