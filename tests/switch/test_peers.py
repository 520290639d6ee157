"""End-to-end against real peers: net-snmp snmpd over a veth we push traffic through, snmpsim
replaying real switch walks, yuma123 netconfd over SSH, into the real API and database."""

from __future__ import annotations

import asyncio
import importlib.resources
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from fabricscope.collectors.sinks.http import HttpSender
from fabricscope.collectors.switch.inventory import parse_inventory
from fabricscope.collectors.switch.scheduler import SwitchScheduler
from fabricscope.collectors.switch.snmp.collector import SnmpCollector
from tests.switch import peers

pytestmark = pytest.mark.slow
SNMPSIM_DATA = Path(str(importlib.resources.files("snmpsim_data"))) / "data"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def veth():
    """fsvA<pid> in our namespace ↔ its peer in a private netns; traffic we send leaves through fsvA."""
    tag = os.getpid() % 100000
    ns, a, b = f"fssw{tag}", f"fsvA{tag}", f"fsvB{tag}"

    def create():
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        _ip("link", "set", b, "netns", ns)
        subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{a}.disable_ipv6=1"], check=True)
        _ip("addr", "add", "10.213.7.1/30", "dev", a)
        _ip("link", "set", a, "up")
        _ip("-n", ns, "addr", "add", "10.213.7.2/30", "dev", b)
        _ip("-n", ns, "link", "set", b, "up")
        subprocess.run(["ping", "-c", "1", "-W", "2", "10.213.7.2"], check=True, capture_output=True)

    _ip("netns", "add", ns)
    create()

    class V:
        name = a

        @staticmethod
        def recreate():
            _ip("link", "del", a)
            create()

    try:
        yield V
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def send_udp(n: int, size: int) -> int:
    """Send n datagrams of `size` payload bytes to the veth peer; returns the Ethernet bytes sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _ in range(n):
            s.sendto(b"x" * size, ("10.213.7.2", 9))
    return n * (size + 8 + 20 + 14)


def _snmp_device(agent: peers.Snmpd, name: str, version: str, monkeypatch, include=None, timeout=2.0):
    monkeypatch.setenv("FS_COMM", agent.community)
    monkeypatch.setenv("FS_AUTH", agent.auth)
    monkeypatch.setenv("FS_PRIV", agent.priv)
    snmp = {"port": agent.port, "version": version}
    if version == "2c":
        snmp["community"] = {"env": "FS_COMM"}
    else:
        snmp["v3"] = {"user": agent.user, "auth_key": {"env": "FS_AUTH"}, "priv_key": {"env": "FS_PRIV"}}
    return parse_inventory({"devices": [{"name": name, "address": "127.0.0.1", "protocols": ["snmp"],
                                         "interval": 5, "timeout": timeout, "snmp": snmp,
                                         "include": include or ["*"]}]}).devices[0]  # fmt: skip


def _value(samples, source, metric):
    return next(s for s in samples if s.source == source and s.metric == metric)


def _settled_poll(collector, source, metric, floor):
    """snmpd caches the interface table for a few seconds: poll until it reflects the traffic."""
    deadline = time.monotonic() + 15
    while True:
        res = asyncio.run(collector.poll())
        s = _value(res.samples, source, metric)
        if s.value >= floor or time.monotonic() > deadline:
            return res, s
        time.sleep(1)


@pytest.mark.root
@pytest.mark.parametrize("version", ["2c", "3"])
def test_snmpd_counters_match_veth_traffic(tmp_path, veth, monkeypatch, version):
    with peers.snmpd(tmp_path / "snmpd") as agent:
        dev = _snmp_device(agent, "hostsw", version, monkeypatch, include=[veth.name])
        col = SnmpCollector(dev)
        src = f"hostsw:{veth.name}"
        first = asyncio.run(col.poll())
        assert {s.source for s in first.samples} == {src}  # include filter applied
        before = _value(first.samples, src, "tx_bytes_total").value
        sent = send_udp(500, 1000)
        res, after = _settled_poll(col, src, "tx_bytes_total", before + sent)
        assert sent <= after.value - before <= sent + 2000  # only our datagrams (+ an ARP or two)
        pkts = _value(res.samples, src, "tx_packets_total").value - _value(first.samples, src, "tx_packets_total").value
        assert 500 <= pkts <= 510
        assert _value(res.samples, src, "oper_up").value == 1.0
        assert not res.problems


@pytest.mark.root
def test_counter_reset_gives_no_bogus_rate_in_the_database(tmp_path, veth, monkeypatch, service_url, db_conn):
    sender = HttpSender(service_url)
    with peers.snmpd(tmp_path / "snmpd") as agent:
        dev = _snmp_device(agent, "resetsw", "2c", monkeypatch, include=[veth.name])
        sched = SwitchScheduler([dev], sender)  # every poll goes to the real API, as in production
        target = sched.targets[0]
        src = f"resetsw:{veth.name}"

        def poll_until(floor: float) -> float:
            deadline = time.monotonic() + 15
            while True:
                assert asyncio.run(sched.poll(target))
                rows = [i for i in sender_items if i["source"] == src and i["metric"] == "tx_bytes_total"]
                if rows[-1]["value"] >= floor or time.monotonic() > deadline:
                    return rows[-1]["value"]
                time.sleep(1)

        sender_items: list[dict] = []
        real_submit = sender.submit

        def submit(kind, item, job=None):
            sender_items.append(item)
            return real_submit(kind, item, job=job)

        sender.submit = submit
        poll_until(0)
        send_udp(200, 1000)
        base = poll_until(200 * 1042)
        time.sleep(1.1)
        poll_until(0)  # an ordinary interval: a real, non-negative rate
        # agent restart + interface recreated (counters back to 0), then more traffic than before:
        # the counter ends above its old value, so only the device's own signals reveal the reset
        agent.stop()
        veth.recreate()
        agent.start()
        restart_ts = time.time()
        send_udp(600, 1000)
        after = poll_until(600 * 1042)
        assert after > base
        assert sender.flush(30)
    sender.close()
    flagged = [i for i in sender_items if i.get("discontinuity") and i["source"] == src]
    assert flagged and all(i["ts"] > restart_ts for i in flagged)
    rows = db_conn.execute(
        "SELECT ts, value, rate FROM sample_view WHERE source = %s AND metric = 'tx_bytes_total' ORDER BY ts",
        (src,)).fetchall()  # fmt: skip
    first_after = next(r for r in rows if r[0].timestamp() > restart_ts)
    assert first_after[2] is None  # no rate across the reset (a naive one would be positive)
    rates = [r[2] for r in rows if r[2] is not None]
    assert rates and min(rates) >= 0
    assert max(rates) < 2 * 800 * 1042  # never more than the traffic we actually sent per second


@pytest.mark.root
def test_unreachable_device_backs_off_without_blocking_others(tmp_path, monkeypatch):
    sink = []

    class Sink:
        def submit(self, kind, item, job=None):
            sink.append(item)
            return True

        def flush(self):
            return True

        def close(self):
            pass

    with peers.snmpd(tmp_path / "snmpd") as agent:
        good = _snmp_device(agent, "good", "2c", monkeypatch)
        dead = _snmp_device(agent, "dead", "2c", monkeypatch, timeout=3.0)
        dead.snmp.port = peers.free_udp_port()  # nothing listens there
        sched = SwitchScheduler([good, dead], Sink(), max_backoff=60)

        async def go():
            t0 = time.monotonic()
            first = await sched.run_once()
            elapsed = time.monotonic() - t0
            second = await sched.run_once()  # within the backoff window: dead is skipped
            await sched.stop()
            return first, second, elapsed

        first, second, elapsed = asyncio.run(go())
    assert first == {"good/snmp": True, "dead/snmp": False}
    assert second == {"good/snmp": True, "dead/snmp": False} and elapsed < 4.5
    dur = {s["source"]: s["value"] for s in sink if s["metric"] == "collector_poll_duration_seconds"}
    assert dur["good"] < 1.0  # polled concurrently, not behind the dead one
    up = [(s["source"], s["value"]) for s in sink if s["metric"] == "collector_up"]
    assert up.count(("dead", 0.0)) == 1 and up.count(("good", 1.0)) == 2  # backoff skipped the retry
    assert sched.targets[1].backoff.failures == 1


@pytest.mark.root
def test_snmpsim_vendor_walk_with_lldp_and_pfc(tmp_path, monkeypatch):
    rec = SNMPSIM_DATA / "cloud" / "arista-dcs-7150s-52-cl.snmprec.bz2"
    with peers.snmpsim(tmp_path / "sim", {"arista-7150s": rec}) as port:
        monkeypatch.setenv("FS_COMM", "arista-7150s")
        dev = parse_inventory(
            {
                "devices": [
                    {
                        "name": "arista1",
                        "address": "127.0.0.1",
                        "protocols": ["snmp"],
                        "vendor": "arista",
                        "timeout": 8,
                        "interval": 10,
                        "snmp": {"port": port, "community": {"env": "FS_COMM"}},
                    }
                ]
            }
        ).devices[0]
        res = asyncio.run(SnmpCollector(dev).poll())  # fmt: skip
    by = {(s.source, s.metric, tuple(sorted((s.labels or {}).items()))): s.value for s in res.samples}
    assert by[("arista1:Ethernet2", "rx_bytes_total", ())] == 2993597393618
    assert by[("arista1:Ethernet47", "speed_bps", ())] == 10e9
    assert ("arista1:Ethernet47", "rx_pause_frames_total", ()) in by
    assert len({s.source for s in res.samples}) >= 50
    assert {link.to_json()["b"] for link in res.links} == {"ZJ-BP-Bak-Arista:Ethernet23", "ZJ-BP-Bak-Arista:Ethernet24"}


@pytest.mark.root
def test_netconfd_ietf_interfaces_over_ssh(tmp_path, monkeypatch):
    monkeypatch.setenv("FS_NC_PW", "nc-Pass-42")
    col, first, second = peers.netconf_two_polls(tmp_path / "nc", "nc1", "nc-Pass-42", 1.0)
    assert col.model is not None and col.model.name.startswith("ietf-interfaces")
    rx0 = _value(first.samples, "nc1:lo", "rx_bytes_total").value
    rx1 = _value(second.samples, "nc1:lo", "rx_bytes_total").value
    assert rx1 - rx0 >= 50 * 1000  # the kernel's real loopback counters moved by our traffic
    assert {s.metric for s in second.samples} >= {
        "rx_bytes_total",
        "tx_bytes_total",
        "rx_packets_total",
        "rx_errors_total",
        "tx_discards_total",
        "oper_up",
    }
