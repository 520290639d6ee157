"""Queue, PFC and watchdog samples reach the real database through the collectors and the real
ingest API, labels included (the gNMI target is the in-process replay server; the Junos device is a
stand-in session replaying its recorded reply, as no Junos runs here)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import psycopg
from ncclient.operations.rpc import RPCError
from ncclient.xml_ import to_ele

from fabricscope.collectors.switch.inventory import parse_inventory
from fabricscope.collectors.switch.netconf import collector as nc_collector
from fabricscope.collectors.switch.netconf.models import JUNOS_CAPABILITY
from tests.switch.fixture_io import FIXTURES, read_gnmi
from tests.switch.gnmi_server import ReplayTarget
from tests.switch.test_into_db import _ship
from tests.switch.test_queues import _collect

SONIC = FIXTURES / "gnmi" / "sonic-countersdb-queues-pfc"
JUNOS = FIXTURES / "netconf" / "junos-qfx-interfaces-extensive"


def test_sonic_queue_samples_into_the_database(service_url: str, db_conn: psycopg.Connection) -> None:
    target = ReplayTarget(read_gnmi(FIXTURES / "gnmi" / "ciena-oc-if-counters" / "responses.json"),
                          models=("openconfig-interfaces", "sonic-db"),
                          by_target={"COUNTERS_DB": read_gnmi(SONIC / "responses.json")})  # fmt: skip
    result = asyncio.run(_collect(target))
    _ship(service_url, result.samples)
    rows = db_conn.execute("SELECT metric, labels, value FROM sample_view WHERE source = 'spine1:Ethernet68' "
                           "AND labels ? 'queue' ORDER BY ts").fetchall()  # fmt: skip
    got = {(m, json.dumps(lab, sort_keys=True)): v for m, lab, v in rows}  # the last value per series
    assert got[("queue_watermark_bytes", '{"queue": "1"}')] == 192.0  # the periodic watermark
    assert ("pfc_deadlock_total", '{"queue": "3"}') in got
    prio = db_conn.execute("SELECT value FROM sample_view WHERE source = 'spine1:Ethernet1' AND metric = "
                           "'rx_pause_frames_total' AND labels->>'priority' = '7'").fetchall()  # fmt: skip
    assert [r[0] for r in prio] == [1.0]


class _JunosSession:
    """What ncclient's manager does with a Junos device, answering from the recorded reply. The queue
    RPC has no public recording, so this session refuses it, as a platform without it would."""

    connected = True
    server_capabilities = ["urn:ietf:params:netconf:base:1.0", f"http://{JUNOS_CAPABILITY}/1.0"]

    def __init__(self) -> None:
        self.rpcs: list[str] = []

    def dispatch(self, rpc: str):  # type: ignore[no-untyped-def]
        self.rpcs.append(rpc)
        if rpc.startswith("<get-interface-information>"):
            return SimpleNamespace(xml=(JUNOS / "reply.xml").read_text())
        raise RPCError(to_ele("<rpc-error><error-severity>error</error-severity></rpc-error>"))

    def close_session(self) -> None:
        self.connected = False


def test_junos_queue_samples_into_the_database(monkeypatch, service_url: str,  # type: ignore[no-untyped-def]
                                               db_conn: psycopg.Connection) -> None:
    session = _JunosSession()
    monkeypatch.setattr(nc_collector.manager, "connect", lambda **_kw: session)
    monkeypatch.setenv("FS_JUNOS_PW", "junos-Pass-1")
    dev = parse_inventory({"devices": [{"name": "qfx1", "address": "192.0.2.10", "protocols": ["netconf"],
                                        "netconf": {"username": "u", "password": {"env": "FS_JUNOS_PW"}}}]}).devices[0]
    col = nc_collector.NetconfCollector(dev)
    result = asyncio.run(col.poll())
    assert len(session.rpcs) == 2 and any("get-interface-queue-information" in p for p in result.problems)
    _ship(service_url, result.samples)
    rows = db_conn.execute("SELECT labels->>'queue', value FROM sample_view WHERE source = 'qfx1:et-0/0/24' "
                           "AND metric = 'tx_queue_packets_total'").fetchall()  # fmt: skip
    assert dict(rows) == {"0": 29690976297.0, "3": 0.0, "4": 0.0, "7": 6060500.0}
    pfc = db_conn.execute("SELECT count(*) FROM sample_view WHERE source = 'qfx1:et-0/0/24' AND metric = "
                          "'rx_pause_frames_total' AND labels ? 'priority'").fetchone()  # fmt: skip
    assert pfc is not None and pfc[0] == 8
