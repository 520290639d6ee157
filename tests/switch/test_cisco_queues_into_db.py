"""snmpsim replays the recorded Catalyst 3750 walk; a ``vendor: cisco`` poll over real UDP walks
CISCO-PORT-QOS-MIB and its per-queue samples (thresholds summed) land in the real database."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from tests.switch import peers
from tests.switch.fixture_io import FIXTURES
from tests.switch.test_into_db import _ship


@pytest.mark.slow
@pytest.mark.root
def test_catalyst_queue_drops_into_the_database(tmp_path, monkeypatch, service_url: str,  # type: ignore[no-untyped-def]
                                                db_conn: psycopg.Connection) -> None:
    from fabricscope.collectors.switch.snmp.collector import SnmpCollector
    from tests.switch.test_snmp_fast import _device

    monkeypatch.setenv("FS_CREC", "crec")
    case = FIXTURES / "snmp" / "cisco-c3750-egress-queues"
    with peers.snmpsim(tmp_path / "sim", {"crec": case / "input.snmprec"}) as port:
        col = SnmpCollector(_device("c3750q", port, "FS_CREC", "cisco"))

        async def go():  # type: ignore[no-untyped-def]
            try:
                return await col.poll(), await col.poll()  # full walk, then a planned one
            finally:
                await col.aclose()

        full, planned = asyncio.run(go())

    def queued(res):  # type: ignore[no-untyped-def]
        return sorted((s.source, s.metric, s.labels["queue"], s.value) for s in res.samples
                      if s.labels and "queue" in s.labels)  # fmt: skip

    assert len(queued(full)) == 2 * 2 * 4  # 2 ports x (enqueued, dropped) x 4 queues
    assert queued(planned) == queued(full)
    _ship(service_url, full.samples)
    rows = db_conn.execute("SELECT labels->>'queue', value FROM sample_view WHERE source = 'c3750q:Gi1/0/12' "
                           "AND metric = 'queue_dropped_packets_total'").fetchall()
    assert dict(rows) == {"1": 0, "2": 149, "3": 0, "4": 129787}
