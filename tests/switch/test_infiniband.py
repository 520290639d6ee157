"""InfiniBand fabric sweep on recorded real tool output: ibnetdiscover (both layouts) → links named
``switch:port`` / ``host:hca``, perfquery -x of switch ports → canonical counters, and a sweep that
keeps its MAD rate and deadline (fake clock), resumes where it stopped, and reaches the scheduler's
link publisher exactly as LLDP links do."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from fabricscope.collectors.host.rdma import ib_source
from fabricscope.collectors.switch.infiniband.collector import InfinibandCollector
from fabricscope.collectors.switch.infiniband.counters import perfquery_samples
from fabricscope.collectors.switch.infiniband.sweep import MADS_PER_QUERY, FabricSweep
from fabricscope.collectors.switch.infiniband.topology import parse_ibnetdiscover
from fabricscope.collectors.switch.inventory import parse_inventory
from fabricscope.collectors.switch.scheduler import SwitchScheduler
from fabricscope.core.errors import CollectionError, ConfigError

IB = Path(__file__).resolve().parents[1] / "fixtures" / "ib"
OSC = (IB / "ibnetdiscover-p-edr-osc" / "ibnetdiscover.txt").read_text()
PERF_1719 = (IB / "perfquery-x-edr-switch-lid1719-2ports" / "perfquery.txt").read_text()


def _recorded_ports() -> dict[tuple[str, str], str]:
    """perfquery -x of LID 1719, split per port as ``perfquery -x 1719 PORT`` prints it."""
    blocks = re.split(r"(?m)^(?=# Port extended counters)", PERF_1719)
    out = {}
    for b in blocks:
        if m := re.match(r"# Port extended counters: Lid (\d+) port (\d+)", b):
            out[(m[1], m[2])] = b
    return out


class Clock:
    """Fake monotonic time: advanced only by sleeping and by each command's own duration."""

    def __init__(self, per_command: float = 0.0) -> None:
        self.t, self.per_command = 1000.0, per_command
        self.starts: list[tuple[float, list[str]]] = []

    def __call__(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        assert s > 0
        self.t += s


def replay(clock: Clock):
    ports = _recorded_ports()

    async def run(argv):
        clock.starts.append((clock.t, list(argv)))
        clock.t += clock.per_command
        if argv[0] == "ibnetdiscover":
            return OSC
        key = (argv[-2], argv[-1])
        if key not in ports:
            raise CollectionError(f"perfquery: no recording for lid {key[0]} port {key[1]}")
        return ports[key]

    return run


def test_ibnetdiscover_ports_report_links_switch_ports_to_host_hcas():
    fabric = parse_ibnetdiscover(OSC)
    links = {(link.a, link.b): link.speed_bps for link in fabric.links()}
    assert links == {
        ("ib-i1l1s01:1", "ib-i1l2s01:1"): 100e9,
        ("ib-i1l1s01:10", "o0001:HCA-1"): 100e9,  # 4x EDR; listed from both ends, one link
        ("ib-i1l1s01:11", "o0002:HCA-1"): 100e9,
        ("ib-i4l1s01:35", "p0001:HCA-1"): 100e9,
    }
    assert ib_source("o0001", "HCA-1", 1) == "o0001:HCA-1"  # the host agent's name for that port
    # unconnected ports (SW 2052 37 "4x ???", SW 1781 80) are nodes, never links or sweep targets
    assert (1781, 80) not in {(n.lid, p) for n, p in fabric.switch_ports()}
    assert {(n.lid, p) for n, p in fabric.switch_ports()} == {(1719, 1), (1719, 10), (1719, 11), (2052, 35),
                                                              (1516, 1)}


def test_ibnetdiscover_topology_file_keeps_one_link_per_cable():
    fabric = parse_ibnetdiscover((IB / "ibnetdiscover-topology-rdma-core-man" / "ibnetdiscover.txt").read_text())
    assert not fabric.problems
    links = fabric.links()
    pairs = [(link.a, link.b) for link in links]
    assert len(pairs) == len(set(pairs)) == 7
    # switch port 10 <-> SW-6IB4 port 1 is listed as 4xSDR on one end and 1xSDR on the other
    assert {link.speed_bps for link in links if link.b == "sw-005442ba00003080:10"} == {2.5e9}
    # vendor-default descriptions ("ISR9024 Voltaire") cannot name a switch: its GUID does
    assert "sw-005442ba00003080:22" in {link.b for link in links}


def test_ibnetdiscover_names_from_node_descriptions_with_stray_spaces():
    fabric = parse_ibnetdiscover((IB / "ibnetdiscover-p-hdr" / "ibnetdiscover.txt").read_text())
    links = {(link.a, link.b) for link in fabric.links()}
    assert ("5FB0405-leaf-IB01:79", "worker20:mlx5_3") in links  # '5FB0405-leaf-IB01 ' trimmed
    assert all(link.speed_bps == 200e9 for link in fabric.links())  # 4x HDR


def test_switch_port_counters_are_scaled_and_named_switch_port():
    got = {(s.source, s.metric): s.value for s in perfquery_samples(PERF_1719, "ib-i1l1s01", 1.0)}
    assert got[("ib-i1l1s01:1", "tx_bytes_total")] == 36298026860928 * 4  # PortXmitData: 4-octet words
    assert got[("ib-i1l1s01:1", "port_xmit_wait_total")] == 22730501
    assert got[("ib-i1l1s01:2", "port_xmit_wait_total")] == 36510964
    assert got[("ib-i1l1s01:1", "link_error_recovery_total")] == 0
    assert got[("ib-i1l1s01:1", "tx_discards_total")] == 0
    assert ("ib-i1l1s01:1", "ib_port_unicast_xmit_packets_total") not in got  # not in the table: left out


def test_sweep_keeps_the_mad_rate():
    clock = Clock()
    sweep = FabricSweep(replay(clock), max_mads_per_second=4.0, deadline_s=60, clock=clock, sleep=clock.sleep)
    result = asyncio.run(sweep.sweep())
    queries = [t for t, argv in clock.starts if argv[0] == "perfquery"]
    assert len(queries) == result.ports_read + sum("no recording" in p for p in result.problems) == 5
    gap = MADS_PER_QUERY / 4.0
    assert all(b - a >= gap - 1e-9 for a, b in zip(queries, queries[1:], strict=False))
    assert result.mads == 5 * MADS_PER_QUERY and result.ports_left == 0
    # only LID 1719 port 1 was recorded: the 4 other ports are reported, the sweep goes on
    assert result.ports_read == 1
    assert {s.source for s in result.samples} == {"ib-i1l1s01:1"}
    assert len([p for p in result.problems if "no recording" in p]) == 4


def test_sweep_stops_at_its_deadline_and_resumes_with_the_ports_left():
    clock = Clock(per_command=0.1)
    sweep = FabricSweep(replay(clock), max_mads_per_second=2.0, deadline_s=2.5, clock=clock, sleep=clock.sleep)
    first = asyncio.run(sweep.sweep())
    assert first.ports_read + first.ports_left + len([p for p in first.problems if "no recording" in p]) == 5
    assert first.ports_left == 3 and any("left for the next sweep" in p for p in first.problems)
    done_first = [argv[-2:] for _, argv in clock.starts if argv[0] == "perfquery"]
    assert clock.t - 1000.0 <= 2.5
    clock.starts.clear()
    second = asyncio.run(sweep.sweep())
    done_second = [argv[-2:] for _, argv in clock.starts if argv[0] == "perfquery"]
    assert not any(a[0] == "ibnetdiscover" for _, a in clock.starts)  # topology only every N sweeps
    assert done_first == [["2052", "35"], ["1719", "1"]]  # 2 queries fit: 1 s apart at 2 MADs/s, 2.5 s
    assert done_second == [["1719", "10"], ["1719", "11"]]  # starts with the ports left over
    assert second.ports_left == 3
    third = asyncio.run(sweep.sweep())
    assert [argv[-2:] for _, argv in clock.starts if argv[0] == "perfquery"][2] == ["1516", "1"]
    assert third.ports_left == 3


def test_inventory_refuses_a_sweep_deadline_past_the_poll_timeout():
    dev = {"name": "fabric1", "address": "localhost", "protocols": ["infiniband"], "interval": 60, "timeout": 20,
           "infiniband": {"sweep_deadline": 25}}
    with pytest.raises(ConfigError, match="sweep_deadline"):
        parse_inventory({"devices": [dev]})


class ListSink:
    def __init__(self) -> None:
        self.items: list[dict] = []

    def submit(self, kind, item) -> bool:
        self.items.append(item)
        return True


def test_scheduler_posts_fabric_links_and_port_samples():
    inv = parse_inventory({"devices": [{
        "name": "fabric1", "address": "localhost", "protocols": ["infiniband"], "interval": 60, "timeout": 30,
        "infiniband": {"ca": "mlx5_0", "max_mads_per_second": 1000, "sweep_deadline": 20}}]})
    clock = Clock()
    published: list[list] = []
    sink = ListSink()
    sched = SwitchScheduler(inv.devices, sink, published.append,
                            factories={"infiniband": lambda d: InfinibandCollector(d, replay(clock))})
    assert asyncio.run(sched.run_once()) == {"fabric1/infiniband": True}
    assert published and ("ib-i1l1s01:10", "o0001:HCA-1") in {(link.a, link.b) for link in published[0]}
    assert clock.starts[0][1] == ["ibnetdiscover", "-C", "mlx5_0"]
    assert clock.starts[1][1][:4] == ["perfquery", "-C", "mlx5_0", "-x"]
    counters = [i for i in sink.items if i["source"] == "ib-i1l1s01:1"]
    assert {i["metric"] for i in counters} >= {"rx_bytes_total", "port_xmit_wait_total", "link_down_total"}


def test_a_hung_perfquery_is_cut_at_the_sweep_deadline():
    async def run(argv):
        if argv[0] == "ibnetdiscover":
            return OSC
        await asyncio.Event().wait()  # never answers
        return ""

    async def main():
        sweep = FabricSweep(run, max_mads_per_second=1000, deadline_s=0.2)
        return await asyncio.wait_for(sweep.sweep(), 10)

    result = asyncio.run(main())
    assert result.ports_read == 0
    assert any("no answer before the sweep deadline" in p for p in result.problems)
