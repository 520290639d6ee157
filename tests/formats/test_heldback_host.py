"""The held-back host recordings of issue #43 (docs/heldback/host.md): after the fixes their second run
is pinned here, and the driver sniffed from the keys alone is the one the recording came from.

Regenerate after a deliberate mapping change with ``python tests/formats/test_heldback_host.py --regen``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fabricscope.collectors import formats  # noqa: E402
from fabricscope.collectors.host import nic  # noqa: E402
from fabricscope.core.errors import FabricscopeError  # noqa: E402
from tests.host.canon import canon  # noqa: E402

HELD = Path(__file__).resolve().parents[1] / "fixtures/heldback/host"
CASES = sorted(p for p in HELD.glob("ethtool/*") if (p / "case.json").is_file())


def _actual(case: Path) -> list[dict]:
    spec = json.loads((case / "case.json").read_text())
    reading = nic.read_ethtool((case / "ethtool-S.txt").read_text(), spec["source"], 1_700_000_000.0, spec["driver"])
    return canon([s for s in reading.samples if not s.metric.startswith("ethtool_")])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_held_back_ethtool_second_run(case: Path) -> None:
    assert _actual(case) == json.loads((case / "expected.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_held_back_driver_is_sniffed_from_distinctive_keys(case: Path) -> None:
    spec = json.loads((case / "case.json").read_text())
    stats, _ = nic.read_ethtool_text((case / "ethtool-S.txt").read_text())
    driver, guesses = nic.sniff_driver(stats)
    assert driver == spec["driver"] and f"--driver {driver}" in guesses[0]


def test_three_held_back_recordings() -> None:
    assert [c.name for c in CASES] == ["bnxt_en-ethq", "i40e-v2.3.2k-ethq", "vmxnet3-ethq"]


# topo -m and dcgm-exporter: read as `fabricscope parse` would, sniffed (no --format).
OTHER = sorted(p for p in [*HELD.glob("topo/*/nvidia-smi-topo-m.txt"), *HELD.glob("dcgm/*/metrics.txt")])


def _parsed(raw: Path) -> dict:
    reg = formats.load()
    fmt = reg.sniff(raw)
    assert fmt is not None, f"{raw} not sniffed"
    r = fmt.read(raw, "node", 1_700_000_000.0)
    return {"format": fmt.name, "samples": canon(r.samples), "events": len(r.events), "problems": r.problems}


@pytest.mark.parametrize("raw", OTHER, ids=[f"{p.parent.parent.name}/{p.parent.name}" for p in OTHER])
def test_held_back_topo_and_dcgm_second_run(raw: Path) -> None:
    assert _parsed(raw) == json.loads((raw.parent / "expected.json").read_text())


# nvidia-smi -q -x (i43r): three Telegraf testdata dumps written unread, run once, then pinned with unmapped.
SMI = sorted(HELD.glob("smi/*/nvidia-smi-q-x.xml"))


def _smi(raw: Path) -> dict:
    fmt = formats.load().sniff(raw)
    assert fmt is not None
    r = fmt.read(raw, "node", 1_700_000_000.0)
    return {"format": fmt.name, "samples": canon(r.samples), "unmapped": r.unmapped, "problems": r.problems}


@pytest.mark.parametrize("raw", SMI, ids=[p.parent.name for p in SMI])
def test_held_back_smi_second_run(raw: Path) -> None:
    assert _smi(raw) == json.loads((raw.parent / "expected.json").read_text())


def test_held_back_smi_values_are_the_files_own() -> None:
    raw = HELD / "smi/rtx-3080-v13-telegraf/nvidia-smi-q-x.xml"
    text = raw.read_text()
    got = {(s["metric"], tuple(sorted(s.get("labels", {}).items()))): s["value"] for s in _smi(raw)["samples"]}
    assert "<instant_power_draw>142.33 W</instant_power_draw>" in text and got[("gpu_power_watts", ())] == 142.33
    assert "<mem_clock>9251 MHz</mem_clock>" in text and got[("gpu_memory_clock_hz", ())] == 9251e6
    assert "<gpu_util>65 %</gpu_util>" in text and got[("gpu_utilization_ratio", ())] == 0.65
    # driver >= 535's cumulative clocks-event times are not a metric yet: named, not dropped
    assert "clocks_event_reasons_counters/clocks_event_reasons_counters_sw_power_cap (1)" in _smi(raw)["unmapped"]


# procfs text formats (i43r): prometheus/node_exporter's fixtures, written unread, run once, pinned.
PROC = sorted(p for p in HELD.glob("*/node-exporter/*") if p.name != "expected.json" and p.parent.parent.name != "psi")


@pytest.mark.parametrize("raw", PROC, ids=[p.parent.parent.name for p in PROC])
def test_held_back_procfs_second_run(raw: Path) -> None:
    assert _smi(raw) == json.loads((raw.parent / "expected.json").read_text())


def test_over_mounted_nfs_path_is_read_once_and_said() -> None:
    raw = HELD / "nfs-mountstats/node-exporter/mountstats"
    got = _smi(raw)
    keys = [(s["source"], s["metric"], tuple(sorted(s.get("labels", {}).items()))) for s in got["samples"]]
    assert len(keys) == len(set(keys)), "one value per series"
    assert got["problems"][0] == ("192.168.1.1:/srv/test (nfs4) on /mnt/nfs/test-dupe is listed again later "
                                  "(over-mounted): its counters skipped, the later mount read")
    assert all(" not read" in p or " not mapped " in p for p in got["problems"][1:])  # i43u: the unread lines
    assert "READ: 1298 1298 0 207680 1210292152 6 79386 79407" in raw.read_text()
    reads = [s["value"] for s in got["samples"] if s["metric"] == "read_ops_total"]
    assert reads == [1298.0, 1298.0]  # /mnt/nfs/test and the visible /mnt/nfs/test-dupe


def test_held_back_lustre_osd_stats_has_nothing_canonical_and_says_so() -> None:
    raw = HELD / "lustre-stats/telegraf-osd-ldiskfs/stats"
    fmt = formats.load().sniff(raw)
    assert fmt is not None and fmt.name == "lustre-stats"
    r = fmt.read(raw, "node", 1_700_000_000.0)
    got = {s.metric: s.value for s in r.samples}
    # get_page's [usec] sum became a time in i43s (lprocfs prints "usec"; the reader had wanted "usecs")
    assert got == {"lustre_get_page_total": 275132812, "lustre_cache_access_total": 19047063027,
                   "lustre_cache_hit_total": 7393729777, "lustre_cache_miss_total": 11653333250,
                   "lustre_get_page_seconds_total": 1320.420955}
    assert all(f"{int(v)} samples" in raw.read_text() for k, v in got.items() if "seconds" not in k)
    assert "[usec] 0 3147 1320420955 " in raw.read_text()
    assert not [s for s in r.samples if not s.metric.startswith("lustre_")]  # only extras: `parse` exits 2


# whole-machine snapshots (i43s): a Linux 2.6.16 ARM board, a RHEL 5 server, a RHEL 8 Hyper-V guest's
# sosreport; written unread, run once (all right), pinned as their first run came out.
SNAP = ("sosreport-rhel8-hyperv", "webpage-rhel5", "d2000-linux2.6.16", "procfs-rs-elwe-nfs41", "hpe-llite-client",
        "hpe-obdfilter-ost0000")
NO_NFS = HELD / "nfs-mountstats/sosreport-rhel8-hyperv/mountstats"
SNAPS = sorted(p for case in SNAP for p in HELD.glob(f"*/{case}/*") if p.name != "expected.json" and p != NO_NFS)


@pytest.mark.parametrize("raw", SNAPS, ids=[f"{p.parent.parent.name}/{p.parent.name}" for p in SNAPS])
def test_held_back_snapshot_second_run(raw: Path) -> None:
    assert _smi(raw) == json.loads((raw.parent / "expected.json").read_text())


def test_held_back_snapshot_values_are_the_files_own() -> None:
    def one(raw: Path) -> dict:
        return {(s["source"], s["metric"]): s["value"] for s in _smi(raw)["samples"]}
    disk = HELD / "diskstats/sosreport-rhel8-hyperv/diskstats"
    assert "8       0 sda 8933 2 856916 3507 30254 21952 2253152 26100 0 8217 15616" in disk.read_text()
    got = one(disk)
    assert got[("node:sda", "read_bytes_total")] == 856916 * 512 and got[("node:sda", "write_ops_total")] == 30254
    snmp = HELD / "proc-net-snmp/webpage-rhel5/snmp"
    assert one(snmp) == {("node", "tcp_out_segments_total"): 3299276999,
                         ("node", "tcp_retransmitted_segments_total"): 106560}
    assert one(HELD / "proc-net-netstat/sosreport-rhel8-hyperv/netstat")[("node", "tcp_timeouts_total")] == 668
    squeeze = {c: one(HELD / f"softnet-stat/{c}/softnet_stat")[("node", "softnet_time_squeeze_total")]
               for c in ("webpage-rhel5", "sosreport-rhel8-hyperv")}
    assert squeeze == {"webpage-rhel5": 2 + 4, "sosreport-rhel8-hyperv": 0x5B + 0x46}
    net = one(HELD / "sysfs-net/sosreport-rhel8-hyperv/sys")
    assert net[("node:eth0", "rx_bytes_total")] == 281233043 and net[("node:lo", "tx_packets_total")] == 162426
    # the Rust procfs crate's mountstats: a real mount's header with edited counts (1 2 3 ...): not counted
    # as a recording, kept because its statvers 1.0 op lines (8 fields, no errors) are read right
    nfs = one(HELD / "nfs-mountstats/procfs-rs-elwe-nfs41/mountstats")
    assert nfs[("node:/srv/elwe/space", "read_bytes_total")] == 5  # bytes: 1 2 3 4 5 6 7 8 -> server read
    assert nfs[("node:/srv/elwe/space", "nfs_timeouts_total")] == 3  # READ: 1 2 3 4 5 6 7 8


def test_held_back_lustre_obdfilter_statfs_twice_keeps_the_first_and_says_so() -> None:
    raw = HELD / "lustre-stats/hpe-obdfilter-ost0000/stats"
    assert "statfs                    35359 samples" in raw.read_text()
    assert "statfs                    124430 samples" in raw.read_text()
    got = _smi(raw)
    assert [s["value"] for s in got["samples"] if s["metric"] == "lustre_statfs_total"] == [35359]
    assert got["problems"] == ["statfs listed 2 times (35359, 124430 samples): the first kept, the others skipped "
                               "(two counters under one name)"]


def test_held_back_mountstats_without_nfs_is_refused_and_says_why() -> None:
    raw = NO_NFS
    assert "with fstype xfs" in raw.read_text() and " nfs" not in raw.read_text()
    fmt = formats.load().sniff(raw)
    assert fmt is not None and fmt.name == "nfs-mountstats"
    with pytest.raises(FabricscopeError, match="no NFS mount"):
        fmt.read(raw, "node", 1_700_000_000.0)


# nccl-topo (i43t): four cloud vendors' NCCL topology files, held back unread; first run: all refused.
TOPO = sorted(HELD.glob("nccl-topo/*/topo.xml"))


@pytest.mark.parametrize("raw", TOPO, ids=[p.parent.name for p in TOPO])
def test_held_back_nccl_topo_second_run(raw: Path) -> None:
    fmt = formats.load().sniff(raw)  # AWS's files open with a licence comment
    assert fmt is not None and fmt.name == "nccl-topo"
    r = fmt.read(raw, "node", 1_700_000_000.0)
    got = {"samples": canon(r.samples), "problems": r.problems}
    assert got == json.loads((raw.parent / "expected.json").read_text())


def test_held_back_nccl_topo_links_are_the_files_own() -> None:
    """Every class-only GPU/NIC's link is its own attributes; the empty ones say why nothing came out."""
    import xml.etree.ElementTree as ET

    for case, devices in (("aws-p4d-24xl", 12), ("azure-ndv5", 16)):
        raw = HELD / f"nccl-topo/{case}/topo.xml"
        got = {(s["source"], s["metric"]): s["value"] for s in _smi(raw)["samples"]}
        leaves = [el for el in ET.parse(raw).getroot().iter("pci") if el.get("class", "")[:6] in ("0x0302", "0x0200",
                                                                                                  "0x0207")]
        assert len(leaves) == devices == len(got) / 2
        for el in leaves:
            gen = {"8": 3, "16": 4, "32": 5}[el.get("link_speed", "").split()[0].split(".")[0]]
            assert got[(f"node:{el.get('busid')}", "pcie_link_generation_max")] == gen
            assert got[(f"node:{el.get('busid')}", "pcie_link_width_max")] == int(el.get("link_width", ""))
    assert _smi(HELD / "nccl-topo/azure-ncv4/topo.xml")["problems"][0].startswith("4 devices without a PCIe link")
    assert _smi(HELD / "nccl-topo/aws-g5-48xl/topo.xml")["problems"] == [
        "9 <pci> entries carry a bus id only (no class, no link): not read"]


# sysfs trees from hwloc's machine captures (i43t), held back unread; read with the format each was held back for.
HWLOC = sorted(HELD.glob("sysfs-*/hwloc-*/sys"))


def _hwloc(raw: Path) -> dict:
    r = formats.load().get(raw.parent.parent.name).read(raw, "node", 1_700_000_000.0)
    return {"samples": canon(r.samples), "unmapped": sorted(set(r.unmapped)), "problems": r.problems}


@pytest.mark.parametrize("raw", HWLOC, ids=[f"{p.parent.parent.name}/{p.parent.name}" for p in HWLOC])
def test_held_back_hwloc_sysfs_second_run(raw: Path) -> None:
    assert _hwloc(raw) == json.loads((raw.parent / "expected.json").read_text())


def test_held_back_hwloc_values_are_the_files_own_and_the_unread_said() -> None:
    tree = HELD / "sysfs-infiniband/hwloc-32em64t-nvme-mic/sys"
    port = tree / "class/infiniband/mlx4_0/ports/1/counters"
    got = {s["metric"]: s["value"] for s in _hwloc(tree)["samples"]}
    assert got["rx_bytes_total"] == 4 * int((port / "port_rcv_data").read_text())
    assert got["port_xmit_wait_total"] == int((port / "port_xmit_wait").read_text()) == 21833
    assert _hwloc(tree)["problems"] == ["1 RDMA devices listed with no ports/<n>/counters in this tree (a partial copy "
                                        "of /sys?), not read: scif0",
                                        "mlx4_0: diag_counters/: 35 counters not read (mlx4 per-device QP error and "
                                        "overflow diagnostics, no canonical metric)"]
    assert len(list((tree / "class/infiniband/mlx4_0/diag_counters").iterdir())) == 36  # with clear_diag
    assert got["oper_up"] == 1 and got["speed_bps"] == 56e9  # ports/1/state "4: ACTIVE", rate "56 Gb/sec (4X FDR)"
    net = HELD / "sysfs-net/hwloc-32em64t-nvme-mic/sys"
    assert _hwloc(net)["problems"] == ["4 interfaces listed with nothing behind them in this tree (a partial copy of "
                                       "/sys?), not read: br0, eth0.1015, lo, mic0"]
    ve = _hwloc(HELD / "sysfs-pcie/hwloc-32intel64-8ve/sys")["samples"]
    pcie = {(s["source"], s["metric"]): s["value"] for s in ve}
    assert pcie[("node:enp96s0f0", "pcie_link_generation")] == 1
    assert pcie[("node:enp96s0f0", "pcie_link_generation_max")] == 3


def test_held_back_node_exporter_psi_second_run() -> None:
    """node_exporter's four PSI files (i43t), sniffed with no option: cpu, io, memory as their names say (a said
    guess, exit 3), irq from its content (no "some" line), no guess."""
    want = {"cpu": ({"some": 14.036781, "full": 0.0}, 1), "io": ({"some": 159.886802, "full": 159.229614}, 1),
            "memory": ({"some": 0.0, "full": 0.0}, 1), "irq": ({"full": 0.008494}, 0)}
    for name, (levels, guesses) in want.items():
        raw = HELD / "psi/node-exporter" / name
        fmt = formats.load().sniff(raw)
        assert fmt is not None and fmt.name == "proc-pressure"
        r = fmt.read(raw, "node", 1_700_000_000.0)
        assert {s.labels["level"]: s.value for s in r.samples} == levels
        assert {s.metric for s in r.samples} == {f"{name}_pressure_seconds_total"}
        assert len(r.guesses) == guesses and r.problems == []


if __name__ == "__main__" and "--regen" in sys.argv:
    for case in CASES:
        (case / "expected.json").write_text(json.dumps(_actual(case), indent=1) + "\n")
        print("wrote", case / "expected.json")
    for raw in OTHER:
        (raw.parent / "expected.json").write_text(json.dumps(_parsed(raw), indent=1) + "\n")
        print("wrote", raw.parent / "expected.json")
    for raw in HWLOC:
        (raw.parent / "expected.json").write_text(json.dumps(_hwloc(raw), indent=1) + "\n")
        print("wrote", raw.parent / "expected.json")
    for raw in TOPO:
        r = formats.load().get("nccl-topo").read(raw, "node", 1_700_000_000.0)
        (raw.parent / "expected.json").write_text(json.dumps({"samples": canon(r.samples), "problems": r.problems},
                                                             indent=1) + "\n")
        print("wrote", raw.parent / "expected.json")
    for raw in [*SMI, *PROC, *SNAPS]:
        (raw.parent / "expected.json").write_text(json.dumps(_smi(raw), indent=1) + "\n")
        print("wrote", raw.parent / "expected.json")
