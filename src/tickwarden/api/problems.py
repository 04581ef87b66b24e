"""Errors as RFC 7807 problem details, and the request-size guard.

Every error leaves as `application/problem+json` with a one-sentence `detail`.
Validation failures name the offending field; tickwarden's own errors map to
their status; database errors caused by a value (an out-of-range number, a NUL
character) are the client's fault and answer 400, never 500.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwarden.errors import Conflict, DatabaseUnavailable, InvalidField, InvalidInput, NotFound, TickwardenError

log = logging.getLogger(__name__)

PROBLEM_TYPE = "application/problem+json"
MAX_BODY_BYTES = 64 * 1024
TITLES = {400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed",
          409: "Conflict", 413: "Request too large", 415: "Unsupported media type", 422: "Invalid input",
          500: "Internal error", 503: "Unavailable"}


class Problem(Exception):
    """An HTTP error with a one-sentence detail."""

    def __init__(self, status: int, title: str, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.title, self.detail, self.headers = status, title, detail, headers or {}


def problem_response(status: int, detail: str, *, title: str | None = None, instance: str | None = None,
                     headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    body = {"type": "about:blank", "title": title or TITLES.get(status, "Error"), "status": status, "detail": detail}
    if instance:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_TYPE, headers=headers)


def describe_validation(errors: list[dict[str, Any]]) -> tuple[int, str]:
    """Turn pydantic's first error into (status, one sentence)."""
    error = errors[0]
    kind = error.get("type", "")
    loc = [str(p) for p in error.get("loc", ()) if p not in ("body",)]
    where = ".".join(loc[1:] if loc and loc[0] in ("query", "path", "header", "cookie") else loc)
    place = loc[0] if loc and loc[0] in ("query", "path", "header") else "body"
    if kind == "json_invalid":
        return 400, "The request body is not valid JSON."
    if kind == "missing" and not where:
        return 422, "The request needs a JSON body."
    if kind == "extra_forbidden":
        return 422, f"Unknown field {where!r} in the request {place}."
    if kind == "missing":
        return 422, f"The {place} field {where!r} is required."
    message = str(error.get("msg", "is not valid")).rstrip(".")
    if where:
        return 422, f"The {place} field {where!r} is not valid: {message[0].lower() + message[1:]}."
    return 422, f"The request {place} is not valid: {message[0].lower() + message[1:]}."


def _error_entry(error: dict[str, Any]) -> dict[str, Any]:
    """One validation error: where (`location`, the dotted `field`) and one sentence; never the input value."""
    loc = [str(p) for p in error.get("loc", ())]
    location = loc[0] if loc and loc[0] in ("query", "path", "header", "cookie", "body") else "body"
    field = ".".join(loc[1:] if loc and loc[0] == location else loc)
    _, message = describe_validation([error])
    return {"location": location, "field": field or None, "type": error.get("type", ""), "message": message}


def install(app: FastAPI) -> None:
    """Register the problem-details handlers on an app."""

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc.status, exc.detail, title=exc.title, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        found = list(exc.errors())
        status, detail = describe_validation(found)
        # Every problem at once, so a client can fix a form in one round trip; `detail` stays the first.
        return problem_response(status, detail, errors=[_error_entry(e) for e in found])

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"There is nothing at {request.url.path}."
        elif exc.status_code == 405:
            detail = f"The method {request.method} is not allowed on {request.url.path}."
        elif not detail.endswith("."):
            detail += "."
        return problem_response(exc.status_code, detail, headers=getattr(exc, "headers", None))

    @app.exception_handler(TickwardenError)
    async def _tickwarden(request: Request, exc: TickwardenError) -> JSONResponse:
        status = 400
        if isinstance(exc, NotFound):
            status = 404
        elif isinstance(exc, Conflict):
            status = 409
        elif isinstance(exc, DatabaseUnavailable):
            status = 503
        elif isinstance(exc, InvalidInput):
            status = 422
        if isinstance(exc, InvalidField):  # a body field's meaning (a cron, a step graph): listed like a shape error
            return problem_response(status, exc.message, errors=[
                {"location": "body", "field": exc.field, "type": "value_error", "message": exc.message}])
        return problem_response(status, exc.message)

    @app.exception_handler(psycopg.DataError)
    async def _data(request: Request, exc: psycopg.DataError) -> JSONResponse:
        return problem_response(400, "The request contains a value the database cannot store or compare.")

    @app.exception_handler(psycopg.OperationalError)
    async def _operational(request: Request, exc: psycopg.OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return problem_response(503, "The database is unavailable; try again shortly.")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem_response(500, "An unexpected error occurred; it has been logged.")


class BodyLimit:
    """Refuse request bodies above a size limit with 413, before any handler reads them.

    The declared Content-Length is checked first; a chunked body is buffered up to
    the limit and replayed to the app, so a lying or absent header changes nothing.
    """

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.limit
            except ValueError:
                await self._reply(scope, receive, send, 400, "The Content-Length header is not a number.")
                return
            if too_big:
                await self._reply(scope, receive, send, 413, f"The request body exceeds {self.limit // 1024} KiB.")
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._reply(scope, receive, send, 413, f"The request body exceeds {self.limit // 1024} KiB.")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _reply(scope: Scope, receive: Receive, send: Send, status: int, detail: str) -> None:
        response = problem_response(status, detail)
        await response(scope, receive, send)


UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CROSS_SITE = "This request was sent from another site; send it from the tickwarden dashboard or with an API token."


class SameOriginWrites:
    """Refuse a state-changing request that a browser sent from another origin (403).

    The dashboard's session cookie is SameSite=Strict, which keeps it off requests from
    another *site*; a sibling subdomain is the same site, and the login form needs no
    cookie at all (login CSRF). So a write must also come from this very origin, as the
    browser says it: Fetch Metadata (`Sec-Fetch-Site`) when sent, else `Origin`, compared by host (an
    opaque `null` origin is refused). A request with neither header is not a browser's
    cross-origin request and passes, as does one that authenticates with an
    `Authorization` header (a token a page of another origin cannot have), and the
    machine check-ins under `/ping/`, which carry their own key.
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in UNSAFE_METHODS or not self._refused(scope):
            await self.app(scope, receive, send)
            return
        log.warning("refused a cross-origin %s to %s", scope["method"], scope["path"][:200])
        await problem_response(403, CROSS_SITE)(scope, receive, send)

    @staticmethod
    def _refused(scope: Scope) -> bool:
        if scope["path"].startswith("/ping/"):
            return False
        headers = dict(scope.get("headers") or [])
        if b"authorization" in headers:
            return False
        fetch_site = headers.get(b"sec-fetch-site")
        if fetch_site is not None:
            return fetch_site not in (b"same-origin", b"none")
        origin = headers.get(b"origin")
        if origin is None:
            return False
        # The host alone: behind a proxy that ends TLS this process sees http for an https page.
        _, _, origin_host = origin.decode("latin-1").rstrip("/").partition("://")
        return not origin_host or origin_host.lower() != headers.get(b"host", b"").decode("latin-1").lower()
