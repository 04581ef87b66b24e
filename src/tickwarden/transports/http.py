"""One way out for the HTTP transports that post JSON: the request, and what its answer means.

Every tenant-supplied address leaves through `post_json`, so the outbound address
policy applies in one place. An answer is translated the same way for every
provider: 2xx is delivered; 408, 429 (after `Retry-After`), 5xx, timeouts and
refused connections are retried; any other 4xx is permanent and disables the channel.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tickwarden import outbound
from tickwarden.transports.base import TransportError


def post_json(url: str, data: Any, *, what: str, timeout: float, headers: dict[str, str] | None = None,
              client: httpx.Client | None = None, tenant_owned: bool = False,
              body: bytes | None = None) -> httpx.Response:
    """POST `data` (or the already encoded `body`) as JSON to `url`; return a 2xx answer or raise the TransportError it means.

    A URL a tenant chose is checked against the outbound address policy before the
    request and again at connect time, so DNS cannot be swapped in between.
    """
    if body is None:
        body = json.dumps(data, separators=(",", ":")).encode()
    sent = {"Content-Type": "application/json", "User-Agent": "tickwarden/1", **(headers or {})}
    try:
        if tenant_owned:
            outbound.check_url(url)
        if client is not None:
            response = client.post(url, content=body, headers=sent, timeout=timeout)
        elif tenant_owned:
            with outbound.guarded_client(timeout) as own:
                response = own.post(url, content=body, headers=sent)
        else:
            with httpx.Client(timeout=timeout, follow_redirects=False) as own:
                response = own.post(url, content=body, headers=sent)
    except outbound.OutboundRefused as exc:
        raise TransportError(f"the {what} URL was refused: {exc.message}", permanent=True) from None
    except httpx.TimeoutException:
        raise TransportError(f"{what} timed out", permanent=False) from None
    except httpx.HTTPError as exc:
        raise TransportError(f"{what} is unreachable: {type(exc).__name__}", permanent=False) from None
    status = response.status_code
    if 200 <= status < 300:
        return response
    if status in (408, 429) or status >= 500:
        raise TransportError(f"{what} answered HTTP {status}", permanent=False,
                             retry_after=retry_after(response.headers.get("Retry-After")))
    raise TransportError(f"{what} answered HTTP {status}", permanent=True)


def retry_after(value: str | None) -> float | None:
    """Seconds a `Retry-After` header asks for; None for an HTTP date (the back-off decides)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
