"""The v2c fast path end to end: against snmpsim replaying recorded real switch walks it must give
exactly what the pysnmp engine gives (planned polls included), for many devices at once in one
event loop; and over a real UDP socket it must survive what a broken agent sends."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from fabricscope.collectors.switch.inventory import parse_inventory
from fabricscope.collectors.switch.snmp import ber
from fabricscope.collectors.switch.snmp.collector import SnmpCollector
from fabricscope.collectors.switch.snmp.v2c import V2cTransport
from fabricscope.core.errors import CollectionError
from tests.switch import peers
from tests.switch.fixture_io import FIXTURES, case_meta

CASES = sorted(p for p in (FIXTURES / "snmp").iterdir() if p.is_dir())


def _device(name, port, community_env, vendor=None):
    spec = {"name": name, "address": "127.0.0.1", "protocols": ["snmp"], "interval": 30, "timeout": 20,
            "vendor": vendor, "snmp": {"port": port, "community": {"env": community_env}}}  # fmt: skip
    return parse_inventory({"devices": [spec]}).devices[0]


def _result(res):
    samples = sorted((s.source, s.metric, sorted((s.labels or {}).items()), s.value) for s in res.samples)
    return samples, sorted(res.problems), sorted(str(link.to_json()) for link in res.links)


@pytest.mark.slow
@pytest.mark.root
def test_fast_path_equals_pysnmp_on_recorded_switches_polled_concurrently(tmp_path, monkeypatch):
    recordings = {f"rec{i}": case / "input.snmprec" for i, case in enumerate(CASES)}
    with peers.snmpsim(tmp_path / "sim", recordings) as port:
        devs = []
        for i, case in enumerate(CASES):
            monkeypatch.setenv(f"FS_REC{i}", f"rec{i}")
            devs.append(_device(case.name, port, f"FS_REC{i}", case_meta(case).get("vendor")))

        async def go():
            ref = [SnmpCollector(d, engine="pysnmp", prune=False) for d in devs]
            fast = [SnmpCollector(d) for d in devs]
            assert all(c.client.fast is not None for c in fast) and all(c.client.fast is None for c in ref)
            expected = await asyncio.gather(*(c.poll() for c in ref))
            first = await asyncio.gather(*(c.poll() for c in fast))  # full walks
            planned_cols = [len(c.plan.next_walk()[0]) for c in fast]
            second = await asyncio.gather(*(c.poll() for c in fast))  # planned walks
            for c in ref + fast:
                await c.aclose()
            return expected, first, second, planned_cols

        expected, first, second, planned_cols = asyncio.run(go())
    for dev, want, a, b, ncols in zip(devs, expected, first, second, planned_cols, strict=True):
        assert want.samples, dev.name
        assert _result(a) == _result(want), dev.name
        assert _result(b) == _result(want), dev.name
        assert ncols < len(SnmpCollector(dev).plan.all), dev.name


# ---- a real UDP peer that misbehaves (bytes on the wire, not a mocked transport) ----


def _reply(request: bytes, *, request_id: int | None = None, status: int = 0) -> bytes:
    """A Response echoing the request's id (or another), one Counter64 varbind, built by pysnmp."""
    from pyasn1.codec.ber import decoder, encoder
    from pysnmp.proto import rfc1902
    from pysnmp.proto.api import v2c

    msg, _ = decoder.decode(request, asn1Spec=v2c.Message())
    rid = int(v2c.apiBulkPDU.get_request_id(v2c.apiMessage.get_pdu(msg)))
    pdu = v2c.ResponsePDU()
    v2c.apiPDU.set_defaults(pdu)
    v2c.apiPDU.set_request_id(pdu, rid if request_id is None else request_id)
    v2c.apiPDU.set_error_status(pdu, status)
    v2c.apiPDU.set_varbinds(pdu, [(rfc1902.ObjectName("1.3.6.1.2.1.31.1.1.1.6.1"), rfc1902.Counter64(2**40 + 5))])
    out = v2c.Message()
    v2c.apiMessage.set_defaults(out)
    v2c.apiMessage.set_community(out, v2c.apiMessage.get_community(msg))
    v2c.apiMessage.set_pdu(out, pdu)
    return encoder.encode(out)


async def _serve(script):
    """UDP peer on 127.0.0.1: for each request, sends what ``script(request)`` returns (a list)."""
    loop = asyncio.get_running_loop()

    class Peer(asyncio.DatagramProtocol):
        def connection_made(self, transport):
            self.transport = transport

        def datagram_received(self, data, addr):
            for d in script(data):
                self.transport.sendto(d, addr)

    transport, _ = await loop.create_datagram_endpoint(Peer, local_addr=("127.0.0.1", 0))
    return transport, transport.get_extra_info("sockname")[1]


def test_malformed_and_stray_replies_are_dropped_and_the_real_one_kept(caplog):
    async def go():
        server, port = await _serve(lambda req: [b"\x30\x03garbage", _reply(req, request_id=12345), _reply(req)])
        t = V2cTransport("leaf7", "127.0.0.1", port, b"s3cret-comm", timeout=2.0, retries=0)
        try:
            return await t.bulk(["1.3.6.1.2.1.31.1.1.1.6"], 5), t
        finally:
            t.close()
            server.close()

    with caplog.at_level(logging.WARNING):
        vbs, t = asyncio.run(go())
    assert vbs == [("1.3.6.1.2.1.31.1.1.1.6.1", 2**40 + 5)]
    assert t.malformed == 1
    assert any("leaf7" in r.getMessage() and "malformed" in r.getMessage() for r in caplog.records)
    assert "s3cret-comm" not in caplog.text and "s3cret-comm" not in repr(t)


def test_only_garbage_times_out_after_the_retries_naming_the_device():
    sent: list[bytes] = []

    async def go():
        server, port = await _serve(lambda req: sent.append(req) or [b"\x00\x01"])
        t = V2cTransport("leaf8", "127.0.0.1", port, b"c", timeout=0.3, retries=2)
        try:
            await t.bulk(["1.3.6.1.2.1.2.2.1.10"], 5)
        finally:
            t.close()
            server.close()

    with pytest.raises(CollectionError, match="leaf8: no SNMP response after 3 tries"):
        asyncio.run(go())
    assert len(sent) == 3 and len(set(sent)) == 1  # same request (same id) on every retry


def test_error_status_is_a_collection_error_and_refused_port_times_out():
    async def too_big():
        server, port = await _serve(lambda req: [_reply(req, status=1)])
        t = V2cTransport("leaf9", "127.0.0.1", port, b"c", timeout=1.0, retries=0)
        try:
            await t.bulk(["1.3.6.1.2.1.2.2.1.10"], 5)
        finally:
            t.close()
            server.close()

    with pytest.raises(CollectionError, match="leaf9: tooBig"):
        asyncio.run(too_big())

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]

    async def refused():
        t = V2cTransport("leaf10", "127.0.0.1", closed_port, b"c", timeout=0.3, retries=1)
        try:
            await t.bulk(["1.3.6.1.2.1.2.2.1.10"], 5)
        finally:
            t.close()

    with pytest.raises(CollectionError, match="leaf10: no SNMP response after 2 tries"):
        asyncio.run(refused())


def test_request_ids_differ_between_requests():
    ids: list[int] = []

    def script(req):
        from pyasn1.codec.ber import decoder
        from pysnmp.proto.api import v2c

        msg, _ = decoder.decode(req, asn1Spec=v2c.Message())
        ids.append(int(v2c.apiBulkPDU.get_request_id(v2c.apiMessage.get_pdu(msg))))
        return [_reply(req)]

    async def go():
        server, port = await _serve(script)
        t = V2cTransport("leaf11", "127.0.0.1", port, b"c", timeout=1.0, retries=0)
        try:
            for _ in range(3):
                assert (await t.bulk(["1.3.6.1.2.1.31.1.1.1.6"], 1))[0][1] == 2**40 + 5
        finally:
            t.close()
            server.close()

    asyncio.run(go())
    assert len(set(ids)) == 3 and all(0 < i < 2**31 for i in ids)
    assert isinstance(ber.decode_response(_reply(ber.encode_getbulk(b"c", 9, 0, 1, ["1.3"]))).request_id, int)
