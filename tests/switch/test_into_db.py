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
