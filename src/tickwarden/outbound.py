"""The outbound address policy: where a URL or host that a tenant supplied may lead.

A tenant's channel (a webhook URL, a Slack base URL, an SMTP host) is a request the
platform makes on the tenant's behalf, from inside the platform's network. Without
a policy it reaches the metadata service (169.254.169.254), the database, the API's
own loopback port. So a tenant-supplied destination must resolve only to global
addresses: loopback, private, link-local, shared (CGNAT), reserved, multicast and
unspecified addresses are refused after DNS resolution, unless the platform lists
a range in `TICKWARDEN_ALLOW_PRIVATE_URLS` (comma-separated CIDR; tests and local
setups use `127.0.0.0/8`). IPv4-mapped IPv6 addresses are judged as the IPv4 address
they carry.

Webhooks and SMTP hosts are checked at connect time, on the very address the socket
connects to, so a name that resolves differently the second time (DNS rebinding) gains
nothing; and redirects are never followed. Platform channels (`env:` configuration, no tenant)
are the platform's own choice and are not restricted.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from tickwarden.errors import TickwardenError

ALLOW_ENV = "TICKWARDEN_ALLOW_PRIVATE_URLS"
SCHEMES = ("http", "https")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundRefused(TickwardenError):
    """The destination is not one a tenant may reach."""


def allowed_ranges(environ: Mapping[str, str] | None = None) -> list[Network]:
    """Return the ranges the platform allows although private; a malformed entry is refused whole."""
    raw = (os.environ if environ is None else environ).get(ALLOW_ENV, "")
    ranges = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        try:
            ranges.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise OutboundRefused(f"{ALLOW_ENV} has an entry that is not a CIDR range: {entry!r}") from None
    return ranges


def _kind(address: Address) -> str | None:
    """Say what kind of forbidden address this is, or None when it is a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local (metadata)"
    if address.is_multicast:
        return "multicast"
    if address.is_unspecified:
        return "unspecified"
    if not address.is_global:
        return "private"
    return None


def check_address(address: Address, ranges: list[Network]) -> None:
    kind = _kind(address)
    if kind is None:
        return
    plain = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped else address
    if any(plain in network for network in ranges if network.version == plain.version):
        return
    raise OutboundRefused(f"the destination resolves to a {kind} address, which tenant channels may not reach "
                          f"(the platform can allow a range in {ALLOW_ENV})")


def resolve(host: str, port: int, ranges: list[Network]) -> list[Address]:
    """Resolve `host` and return its addresses, each checked; refuse if any one is forbidden.

    Every address is checked, not only the first: a name that answers one public and
    one private address would otherwise reach the private one on a retry.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise OutboundRefused(f"the destination host {host!r} does not resolve") from None
    addresses: list[Address] = []
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        check_address(address, ranges)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise OutboundRefused(f"the destination host {host!r} does not resolve")
    return addresses


def check_url(url: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a tenant URL with another scheme, embedded credentials or a forbidden destination."""
    try:
        split = urlsplit(url)
        port = split.port or (443 if split.scheme == "https" else 80)
    except ValueError:
        raise OutboundRefused("the URL is not valid") from None
    if split.scheme not in SCHEMES or not split.hostname:
        raise OutboundRefused("the URL must be http:// or https:// with a host")
    if split.username or split.password:
        raise OutboundRefused("the URL must not carry credentials; use the channel's secret_ref")
    resolve(split.hostname, port, allowed_ranges(environ))


class _GuardedBackend(httpcore.SyncBackend):
    """Resolve, check and connect to the checked address itself: no second lookup to rebind."""

    def __init__(self, ranges: list[Network]):
        self.ranges = ranges

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        error: Exception | None = None
        for address in resolve(host, port, self.ranges):
            try:
                # TLS still verifies the certificate against the URL's host name (httpcore
                # passes the origin's host as server_hostname), not against this address.
                return super().connect_tcp(str(address), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None
        raise error


def guarded_client(timeout: float, environ: Mapping[str, str] | None = None) -> httpx.Client:
    """An HTTP client for tenant destinations: checked at connect time, no redirects, no proxy from the environment."""
    transport = httpx.HTTPTransport(trust_env=False)
    # httpcore's pool hands its backend to every connection it opens; this is the one seam for it.
    transport._pool._network_backend = _GuardedBackend(allowed_ranges(environ))
    return httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False, transport=transport)
