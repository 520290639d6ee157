"""The HTTP client webhooks are sent with: every TCP connection goes to an address that was
resolved and checked against the destination policy just before connecting, so a name that
resolves to an internal address at send time (DNS rebinding) is refused, not connected to.

httpcore connects by host name through a pluggable network backend; this one resolves the name
itself, checks every address, and connects to the checked address. TLS still verifies the
certificate against the URL's host name (httpcore passes it as the server name, not the address).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpcore
import httpx

from fabricscope.service.alerts.destinations import DestinationRefused, Policy

# host, port -> the addresses to connect to (tests inject one that answers what a rebinding DNS would)
Resolver = Callable[[str, int], Awaitable[list[str]]]


# Not the loop's default executor: asyncio.run waits for that one at the end of a delivery run, so
# a DNS lookup hanging past the attempt deadline would hold up the run's end (and the next run).
_DNS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().run_in_executor(
        _DNS, functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM))
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, policy: Policy, resolver: Resolver) -> None:
        self._policy = policy
        self._resolve = resolver
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await self._resolve(host, port)
        except OSError as exc:  # gaierror: no such name, or DNS unreachable (retried later)
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc.strerror or exc}") from exc
        if not addresses:
            raise httpcore.ConnectError(f"{host} resolves to no address")
        reason = self._policy.addresses_refusal(host, addresses)
        if reason is not None:
            raise DestinationRefused(reason)
        last: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                     socket_options=socket_options)
            except httpcore.ConnectError as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise DestinationRefused("a Unix socket is not a webhook destination")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, policy: Policy, resolver: Resolver, *, limits: httpx.Limits) -> None:
        super().__init__(trust_env=False, limits=limits)
        # httpx takes no network backend, but its transport is a thin layer over an httpcore pool
        # that does: the same pool, built with the checking backend.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False), max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(policy, resolver))


def client(policy: Policy, *, timeout_s: float, concurrency: int,
           resolver: Resolver | None = None) -> httpx.AsyncClient:
    """No proxies from the environment (they would connect for us, unchecked), no redirects (a
    302 to an internal address would bypass the registration check)."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(
        transport=GuardedTransport(policy, resolver or system_resolver, limits=limits),
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 3.0)), follow_redirects=False, trust_env=False)
