"""Each protocol's samples reach the real database through the real ingest API with canonical names."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from fabricscope.collectors.sinks.http import HttpSender
from fabricscope.collectors.switch.gnmi.client import GnmiCollector
from tests.switch import peers
from tests.switch.fixture_io import FIXTURES, read_gnmi
from tests.switch.test_gnmi_wire import _device, _with_target


def _ship(url: str, samples: list) -> None:  # type: ignore[type-arg]
    sender = HttpSender(url, flush_interval_s=0.1)
    for s in samples:
        assert sender.submit("samples", s.to_json())
    assert sender.flush(30), sender.stats
    sender.close()


def test_gnmi_stream_into_the_database(service_url: str, db_conn: psycopg.Connection) -> None:
    responses = read_gnmi(FIXTURES / "gnmi" / "ciena-oc-if-counters" / "responses.json")

    async def go(port: int):  # type: ignore[no-untyped-def]
        return await GnmiCollector(_device(port, encoding="json_ietf")).poll()

    _, result = asyncio.run(_with_target(responses, go))
    _ship(service_url, result.samples)
    rows = db_conn.execute("SELECT source, metric, value FROM sample_view WHERE device = 'spine1'").fetchall()
    got = {(r[0], r[1]): r[2] for r in rows}
    for s in result.samples:
        assert got[(s.source, s.metric)] == pytest.approx(s.value)
    assert {m for _, m in got} >= {"rx_bytes_total", "tx_bytes_total", "rx_errors_total"}


@pytest.mark.slow
@pytest.mark.root
def test_netconfd_counters_into_the_database(tmp_path, monkeypatch, service_url: str,  # type: ignore[no-untyped-def]
                                             db_conn: psycopg.Connection) -> None:
    monkeypatch.setenv("FS_NC_PW", "nc-Pass-43")
    _, first, second = peers.netconf_two_polls(tmp_path / "nc", "ncdb1", "nc-Pass-43", 1.5)
    _ship(service_url, first.samples + second.samples)
    rows = db_conn.execute("SELECT value, rate FROM sample_view WHERE source = 'ncdb1:lo' AND metric = "
                           "'rx_bytes_total' ORDER BY ts").fetchall()
    assert len(rows) == 2 and rows[0][1] is None
    assert rows[1][0] - rows[0][0] >= 50_000 and rows[1][1] > 0  # the server's rate of the real traffic


@pytest.mark.slow
@pytest.mark.root
def test_snmp_queue_counters_into_the_database(tmp_path, monkeypatch, service_url: str,  # type: ignore[no-untyped-def]
                                               db_conn: psycopg.Connection) -> None:
    """snmpsim replays the recorded Junos 12.3 walk; a vendor: juniper poll's per-queue samples land
    in the database with their ``queue`` label (queue 3: 3308 tail + 1 RED drops)."""
    from fabricscope.collectors.switch.snmp.collector import SnmpCollector
    from tests.switch.test_snmp_fast import _device

    monkeypatch.setenv("FS_QREC", "qrec")
    case = FIXTURES / "snmp" / "juniper-mx960-12-cos-drops"
    with peers.snmpsim(tmp_path / "sim", {"qrec": case / "input.snmprec"}) as port:
        col = SnmpCollector(_device("mxq1", port, "FS_QREC", "juniper"))

        async def go():  # type: ignore[no-untyped-def]
            try:
                return await col.poll()
            finally:
                await col.aclose()

        result = asyncio.run(go())
    queued = [s for s in result.samples if s.labels and "queue" in s.labels]
    assert len(queued) == 8 * 3  # tx packets, tx bytes, drops for 8 queues; no depth on this Junos
    _ship(service_url, result.samples)
    rows = db_conn.execute("SELECT labels->>'queue', value FROM sample_view WHERE source = 'mxq1:xe-0/2/1' "
                           "AND metric = 'queue_dropped_packets_total'").fetchall()
    assert dict(rows) == {str(q): v for q, v in zip(range(8), [210944541, 0, 0, 3309, 0, 0, 0, 0], strict=True)}
