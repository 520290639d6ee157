"""The IPv4 addresses an IPv6 address carries (issue #46 item 10).

A gateway translates these forms to the IPv4 address inside, so `64:ff9b::7f00:1` reaches
127.0.0.1 on a network with a NAT64 gateway. The destination check judges every address read
here as well as the IPv6 address itself. The local-use NAT64 prefix (RFC 8215) may be cut at /48,
/56, /64 or /96 (RFC 6052 2.2), so the address a gateway reaches through it cannot be read without
the operator's prefix length: its /96 reading is returned, and the whole prefix (LOCAL_USE) is not
public (Python 3.11's address tables predate RFC 8215 and call it global).
"""

from __future__ import annotations

import ipaddress

_V4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")          # RFC 4291 2.5.5.2
_V4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")    # RFC 2765 (SIIT)
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")              # RFC 4291 2.5.5.1 (deprecated)
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")    # RFC 6052 2.1
LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")          # RFC 8215
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")            # RFC 3056
_TEREDO = ipaddress.IPv6Network("2001::/32")                 # RFC 4380


def _bits(value: int, first: int, count: int) -> int:
    return (value >> (128 - first - count)) & ((1 << count) - 1)


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address `ip` may stand for; empty for an IPv6 address that embeds none."""
    value = int(ip)
    if ip in _V4_MAPPED or ip in _V4_TRANSLATED or ip in _NAT64_WELL_KNOWN:
        return [ipaddress.IPv4Address(value & 0xFFFFFFFF)]
    if ip in _V4_COMPATIBLE:
        # `::` and `::1` are the IPv6 unspecified and loopback addresses (judged as themselves,
        # and refused); every other address here is ::a.b.c.d
        return [] if value <= 1 else [ipaddress.IPv4Address(value)]
    if ip in LOCAL_USE:
        return [ipaddress.IPv4Address(value & 0xFFFFFFFF)]  # the /96 layout; see LOCAL_USE
    if ip in _SIX_TO_FOUR:
        return [ipaddress.IPv4Address(_bits(value, 16, 32))]
    if ip in _TEREDO and ip.teredo is not None:
        server, client = ip.teredo
        return [server, client]
    return []
