"""The dashboard: server-rendered pages over the same alert state as the API."""

from tickwarden.dashboard import pages  # noqa: F401  (registers the workflow page and the runs list)
from tickwarden.dashboard.views import router

__all__ = ["router"]
