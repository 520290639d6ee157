"""Where webhooks may send: never to loopback, link-local (cloud metadata), private or otherwise
non-public addresses unless `FABRICSCOPE_WEBHOOK_ALLOW_DESTINATIONS` admits them, so that an admin
token cannot turn the delivery log into a port scanner of the service's own network.

Checked twice: when a webhook is registered (the host as written, in every IPv4 spelling the C
resolver accepts, plus what it resolves to now) and on every connect, against the addresses the
connection is actually made to (service/alerts/transport.py), so a name that later resolves to an
internal address (DNS rebinding) is refused too. An IPv6 address is judged with every IPv4 address
it embeds (NAT64, 6to4, IPv4-compatible/-mapped/-translated): a gateway would connect to that one.
"""

from __future__ import annotations

import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from fabricscope.core.errors import FabricscopeError
from fabricscope.service.alerts.embedded_v4 import LOCAL_USE, embedded_ipv4

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Names that are internal by definition (RFC 6761 localhost, RFC 8375 home.arpa, mDNS .local, the
# ICANN private-use .internal that holds metadata.google.internal) and the bare metadata aliases.
_INTERNAL_NAMES = frozenset({"localhost", "metadata", "instance-data"})
_INTERNAL_SUFFIXES = (".localhost", ".internal", ".local", ".home.arpa", ".localdomain")
SETTING = "FABRICSCOPE_WEBHOOK_ALLOW_DESTINATIONS"

# Registration resolves in a request handler: a hanging DNS server must not hold the request.
_RESOLVE_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="webhook-dns")
REGISTRATION_RESOLVE_S = 2.0


class DestinationRefused(FabricscopeError):
    """The destination is internal and not on the allowlist (never retried)."""


@dataclass(frozen=True)
class Policy:
    networks: tuple[IPNetwork, ...] = ()
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()

    def admits_name(self, host: str) -> bool:
        host = _norm(host)
        return host in self.names or host.endswith(self.suffixes)

    def address_refusal(self, ip: IPAddress) -> str | None:
        """Why `ip` may not be sent to (`127.0.0.1 is a loopback address`), or None when it may."""
        found = self._kind(ip)
        return None if found is None else f"{found[0]} is {found[1]} address"

    def _kind(self, ip: IPAddress) -> tuple[IPAddress, str] | None:
        """The first internal address `ip` is or reaches through a gateway (NAT64, 6to4, the
        IPv4-mapped, -compatible and -translated forms: service/alerts/embedded_v4.py)."""
        if isinstance(ip, ipaddress.IPv6Address):
            for inner in embedded_ipv4(ip):
                found = self._own_kind(inner)
                if found is not None:
                    return found
            if ip.ipv4_mapped is not None:
                return None  # ::ffff:a.b.c.d is a.b.c.d, judged above
            if ip in LOCAL_USE and not any(ip in net for net in self.networks):
                return ip, "a local-use NAT64 (RFC 8215), not a public"
        return self._own_kind(ip)

    def _own_kind(self, ip: IPAddress) -> tuple[IPAddress, str] | None:
        if any(ip in net for net in self.networks):
            return None
        for kind, hit in (("a loopback", ip.is_loopback), ("a link-local (cloud metadata)", ip.is_link_local),
                          ("an unspecified", ip.is_unspecified), ("a multicast", ip.is_multicast),
                          ("a private", ip.is_private), ("not a public", not ip.is_global)):
            if hit:
                return ip, kind
        return None

    def name_refusal(self, host: str) -> str | None:
        host = _norm(host)
        if host in _INTERNAL_NAMES or host.endswith(_INTERNAL_SUFFIXES):
            return f"{host} is an internal host name"
        return None

    def addresses_refusal(self, host: str, addresses: list[str]) -> str | None:
        """At connect time: the name as written, then every address it resolved to."""
        if self.admits_name(host):
            return None
        reason = self.name_refusal(host)
        if reason is not None:
            return reason
        for addr in addresses:
            found = self._kind(ipaddress.ip_address(addr.split("%", 1)[0]))  # without an IPv6 zone id
            if found is not None:
                ip, kind = found
                return (f"{ip} is {kind} address" if literal_address(host) is not None
                        else f"{_norm(host)} resolves to {ip}, {kind} address")
        return None


def _norm(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def parse_allowlist(text: str) -> Policy:
    """`127.0.0.1,10.20.0.0/16,hooks.corp,*.corp` (already validated by Settings)."""
    nets: list[IPNetwork] = []
    names: set[str] = set()
    suffixes: list[str] = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        try:
            nets.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            if entry.startswith("*."):
                suffixes.append(_norm(entry[1:]))
            else:
                names.add(_norm(entry))
    return Policy(tuple(nets), frozenset(names), tuple(suffixes))


def literal_address(host: str) -> IPAddress | None:
    """The address a host spells, in any form the C resolver reads as one: `[::1]`, `127.1`,
    `2130706433`, `0x7f000001`, `0177.0.0.1` (inet_aton)."""
    host = _norm(host)
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, UnicodeError):
        return None


def registration_refusal(host: str, port: int, policy: Policy) -> str | None:
    """Why a webhook to `host` may not be registered, or None. A name that does not resolve (yet)
    is accepted: the connect-time check is the one that counts."""
    if policy.admits_name(host):
        return None
    ip = literal_address(host)
    if ip is not None:
        return policy.address_refusal(ip)
    reason = policy.name_refusal(host)
    if reason is not None:
        return reason
    fut = _RESOLVE_POOL.submit(socket.getaddrinfo, _norm(host), port, type=socket.SOCK_STREAM)
    try:
        infos = fut.result(timeout=REGISTRATION_RESOLVE_S)
    except (OSError, UnicodeError, FutureTimeout):
        return None
    return policy.addresses_refusal(host, [str(info[4][0]) for info in infos])
