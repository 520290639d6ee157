"""Issue #46 item 10: IPv6 forms that embed an IPv4 address (RFC 6052 NAT64, RFC 8215 local-use
NAT64, 6to4, IPv4-compatible, -mapped and -translated) are judged by the IPv4 address a gateway
would reach, at registration (a real service) and at connect (the real guarded transport)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from fabricscope.service.alerts import transport
from fabricscope.service.alerts.destinations import DestinationRefused, parse_allowlist

# (spelling, the IPv4 address it carries); every one passed both checks before issue #46
EMBEDDING = [
    ("64:ff9b::7f00:1", "127.0.0.1"), ("64:ff9b::127.0.0.1", "127.0.0.1"),
    ("64:ff9b::a9fe:a9fe", "169.254.169.254"), ("64:ff9b::a00:5", "10.0.0.5"),
    ("64:ff9b:1::7f00:1", "127.0.0.1"), ("64:ff9b:1::a9fe:a9fe", "169.254.169.254"),
    ("2002:7f00:1::1", "127.0.0.1"), ("2002:a9fe:a9fe::", "169.254.169.254"), ("2002:c0a8:114::1", "192.168.1.20"),
    ("::127.0.0.1", "127.0.0.1"), ("::169.254.169.254", "169.254.169.254"), ("::a00:5", "10.0.0.5"),
    ("::ffff:0:127.0.0.1", "127.0.0.1"), ("::ffff:0:a9fe:a9fe", "169.254.169.254"),
    ("::ffff:0:6464:64c8", "100.100.100.200"), ("::ffff:169.254.169.254", "169.254.169.254"),
]


@pytest.mark.parametrize(("spelling", "inner"), EMBEDDING)
def test_embedded_internal_ipv4_is_refused_at_registration(api: httpx.Client, spelling: str, inner: str) -> None:
    r = api.post("/v1/webhooks", json={"url": f"http://[{spelling}]:8000/s3cr3t-path"})
    assert r.status_code == 422, r.text
    [err] = r.json()["detail"]
    assert err["loc"] == ["body", "url"] and f"{inner} is " in err["msg"], err
    assert "s3cr3t-path" not in r.text


def test_local_use_nat64_prefix_is_not_public(api: httpx.Client) -> None:
    """RFC 8215's prefix may be cut at /48 to /96, so any layout may hide an internal address:
    64:ff9b:1:7f00:0:100:: is 127.0.0.1 behind a /48 gateway."""
    for spelling in ("64:ff9b:1:7f00:0:100::", "64:ff9b:1::808:808"):
        r = api.post("/v1/webhooks", json={"url": f"http://[{spelling}]/h"})
        assert r.status_code == 422, r.text


def test_embedded_public_ipv4_is_still_accepted(api: httpx.Client) -> None:
    for spelling in ("64:ff9b::808:808", "2002:808:808::1", "::ffff:0:808:808", "::ffff:8.8.8.8"):
        r = api.post("/v1/webhooks", json={"url": f"http://[{spelling}]/h"})
        assert r.status_code == 201, (spelling, r.text)
        assert api.delete(f"/v1/webhooks/{r.json()['id']}").status_code == 204


def _send(address: str, allow: str = "") -> BaseException | None:
    async def resolver(host: str, port: int) -> list[str]:
        return [address]  # what DNS answers at send time (an AAAA record, or DNS64's synthesis)

    async def go() -> BaseException | None:
        async with transport.client(parse_allowlist(allow), timeout_s=1.0, concurrency=1,
                                    resolver=resolver) as c:
            try:
                await c.get("http://hooks.fabricscope.test:9/h")
            except (DestinationRefused, httpx.HTTPError) as exc:
                return exc
        return None
    return asyncio.run(go())


@pytest.mark.parametrize(("spelling", "inner"), EMBEDDING)
def test_embedded_internal_ipv4_is_refused_at_connect(spelling: str, inner: str) -> None:
    exc = _send(spelling)
    assert isinstance(exc, DestinationRefused), repr(exc)
    assert f"resolves to {inner}, " in str(exc)


def test_allowlisted_inner_address_is_admitted_at_connect() -> None:
    # admitted, so it is connected to: with no NAT64 gateway here that fails to connect
    exc = _send("64:ff9b::7f00:1", allow="127.0.0.1")
    assert isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)), repr(exc)
