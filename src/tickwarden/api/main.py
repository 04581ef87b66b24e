"""Build the control-plane app: the API routers, the dashboard and the operations endpoints.

`create_app(db, clock)` is the factory the tests and `tickwarden serve` use. For
uvicorn on its own, `create_app_from_env` is a no-argument factory:

    uvicorn --factory tickwarden.api.main:create_app_from_env

It connects to `TICKWARDEN_DATABASE_URL` (or the embedded server) on the wall clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from tickwarden.api import problems
from tickwarden.api.routers import (
    alerts,
    channels,
    environments,
    erasure,
    ops,
    retention,
    runs,
    tenants,
    workflows,
)
from tickwarden.api.routers import checkins as checkins_router
from tickwarden.api.routers import maintenance as maintenance_router
from tickwarden.api.routers import secrets as secrets_router
from tickwarden.clock import Clock, WallClock
from tickwarden.db import Database
from tickwarden.metrics import registry_for
from tickwarden.transports import Transport

DESCRIPTION = """Run cron-scheduled workflows for many tenants; alert once, in one thread, with an owner.

Authenticate with `Authorization: Bearer <token>` (create one with `tickwarden tokens create`).
A member token sees one tenant; a platform token sees every tenant. Errors are RFC 7807
problem details; every list is paginated with `limit` and `cursor` (pass back `next_cursor`).
"""


def create_app(
    db: Database,
    clock: Clock,
    *,
    transports: Callable[[], Mapping[str, Transport]] | None = None,
    body_limit: int = problems.MAX_BODY_BYTES,
) -> FastAPI:
    """Return the app serving the API, the dashboard, /metrics, /healthz and /readyz."""
    from tickwarden import dashboard  # deferred: the dashboard imports the API's pieces

    app = FastAPI(title="tickwarden", version="1", description=DESCRIPTION, openapi_url="/openapi.json",
                  docs_url=None, redoc_url=None,
                  # operationId = the handler's name (`list_alerts`), what generated clients call it
                  generate_unique_id_function=lambda route: route.name)
    app.state.db = db
    app.state.clock = clock
    app.state.registry = registry_for(db, clock)
    app.state.transports = transports or _default_transports()
    problems.install(app)
    for module in (tenants, workflows, runs, alerts, environments, channels, ops, secrets_router, erasure, retention):
        app.include_router(module.router)
    app.include_router(checkins_router.router)
    app.include_router(maintenance_router.router)
    app.include_router(dashboard.router)
    from tickwarden.dashboard.ack_link_views import router as ack_link_router

    app.include_router(ack_link_router)  # signed acknowledge links: no login, one alert, once
    static = resources.files("tickwarden").joinpath("static")
    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    _install_docs(app)
    app.add_middleware(problems.BodyLimit, limit=body_limit)
    app.add_middleware(problems.SameOriginWrites)
    return app


def _install_docs(app: FastAPI) -> None:
    """Serve Swagger UI at /docs from assets shipped with the package: it must work offline."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs-assets", StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="tickwarden API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon-32x32.png",
        )


def _default_transports() -> Callable[[], Mapping[str, Transport]]:
    """Build the real transports once, on the first test-send."""
    built: dict[str, Transport] = {}

    def get() -> Mapping[str, Transport]:
        if not built:
            from tickwarden.transports import default_transports

            built.update(default_transports())
        return built

    return get


def create_app_from_env() -> FastAPI:
    """Connect to the configured database on the wall clock (for `uvicorn --factory`)."""
    return create_app(Database(application_name="tickwarden-api"), WallClock())
