"""The dashboard: server-rendered pages over the same alert state as the API."""

from tickwarden.dashboard.views import router

__all__ = ["router"]
