"""Issue #43 item 1, the last silent drops of the host parsers (i43u): what a recording holds is read or said.

mountstats' ``xprt:``, ``age:`` and ``events:`` lines, an RDMA port's ``state`` and ``rate``, mlx4's
``diag_counters/`` and an NCCL topology's ``<nvlink>`` entries, on the recorded fixtures.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from fabricscope.collectors import formats
from fabricscope.collectors.formats import Reading
from fabricscope.collectors.host.rdma import RdmaCollector

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NFS = sorted(FIXTURES.glob("nfs/*/mountstats"))
IB_TREE = FIXTURES / "formats/sysfs-infiniband-procfs/sys"


def _read(fmt: str, path: Path) -> Reading:
    return formats.load().formats[fmt].read(path, "h1", 1_700_000_000.0)


def _values(r: Reading) -> dict[tuple[str, str], float]:
    return {(s.source, s.metric): s.value for s in r.samples if not s.labels}


def test_nconnect_rdma_transports_are_summed_from_the_files_own_lines() -> None:
    raw = FIXTURES / "nfs/procfs-nfs3-rdma-nconnect16/mountstats"
    xprts = [line.split() for line in raw.read_text().splitlines() if line.strip().startswith("xprt:")]
    assert len(xprts) == 16 and all(x[1] == "rdma" and len(x) == 29 for x in xprts)
    got = _values(_read("nfs-mountstats", raw))
    # xprt_rdma_print_stats: 0 (port), bind_count, connect_count, connect_time, idle_time, sends, recvs, bad_xids,
    # req_u, bklog_u, then the RDMA counts
    for col, metric in ((4, "nfs_transport_connects_total"), (7, "nfs_rpc_sends_total"),
                        (8, "nfs_rpc_receives_total"), (9, "nfs_rpc_bad_xids_total"),
                        (11, "nfs_rpc_backlog_queue_total")):
        assert got[("h1:<mountpoint>", metric)] == sum(int(x[col]) for x in xprts), metric


@pytest.mark.parametrize("raw", NFS, ids=[p.parent.name for p in NFS])
def test_every_unread_mountstats_line_kind_is_one_problem_per_mount(raw: Path) -> None:
    r = _read("nfs-mountstats", raw)
    mounts = {s.source.removeprefix("h1:") for s in r.samples}
    text = raw.read_text()
    nfs_blocks = [b for b in re.split(r"\n(?=device )", text) if re.search(r"fstype nfs4? ", b.split("\n")[0] + " ")]
    assert len(nfs_blocks) == len(mounts) >= 1
    for kind in ("xprt tcp|xprt rdma", "age", "events"):
        lines = [p for p in r.problems if re.search(rf": ({kind})[ :]", p)]
        assert len(lines) == len(mounts), (kind, r.problems)  # one per mount, never one per value
    events = [p for p in r.problems if ": events: " in p]
    assert all("1 line (27 values) not read" in p for p in events)


def test_a_line_kind_the_reader_does_not_know_is_said(tmp_path: Path) -> None:
    text = (FIXTURES / "nfs/procfs-k8s-nfs41-node-red/mountstats").read_text()
    raw = tmp_path / "mountstats"
    raw.write_text(text.replace("\tbytes:", "\tfsc:\t1 2 3 4 5\n\tbytes:", 1))
    problems = _read("nfs-mountstats", raw).problems
    assert any(": fsc: 1 line (5 values) not read: a line kind this reader does not know" in p for p in problems)


def test_ib_port_state_and_rate_are_read_as_the_sysfs_net_gauges() -> None:
    got = _values(_read("sysfs-infiniband", IB_TREE))
    for dev, port, source in (("hfi1_0", 1, "h1:hfi1_0"), ("mlx4_0", 2, "h1:mlx4_0/2"), ("mlx5_0", 1, "h1:mlx5_0")):
        d = IB_TREE / f"class/infiniband/{dev}/ports/{port}"
        assert (d / "state").read_text().strip() == "4: ACTIVE"
        gbps = float((d / "rate").read_text().split()[0])
        assert got[(source, "oper_up")] == 1.0
        assert got[(source, "speed_bps")] == gbps * 1e9
    assert got[("h1:hfi1_0", "speed_bps")] == 100e9  # "100 Gb/sec (4X EDR)"


def test_a_down_ib_port_has_no_line_rate_and_a_garbled_state_is_said(tmp_path: Path) -> None:
    tree = tmp_path / "sys"
    shutil.copytree(IB_TREE, tree)
    ports = tree / "class/infiniband"
    (ports / "mlx4_0/ports/2/state").write_text("1: DOWN\n")
    (ports / "hfi1_0/ports/1/state").write_text("weird\n")
    r = _read("sysfs-infiniband", tree)
    got = _values(r)
    assert got[("h1:mlx4_0/2", "oper_up")] == 0.0 and ("h1:mlx4_0/2", "speed_bps") not in got
    assert ("h1:hfi1_0", "oper_up") not in got
    assert "hfi1_0/1: state 'weird' not understood: oper_up not read" in r.problems


def test_the_agent_reads_the_same_state_and_rate() -> None:
    samples = RdmaCollector("h1", sys_root=IB_TREE).poll()
    got = {(s.source, s.metric): s.value for s in samples}
    assert got[("h1:mlx4_0", "speed_bps")] == 40e9 and got[("h1:mlx5_0", "oper_up")] == 1.0


def test_mlx4_diag_counters_are_said_once_per_device() -> None:
    tree = FIXTURES / "heldback/host/sysfs-infiniband/hwloc-32em64t-nvme-mic/sys"
    diag = next(tree.glob("devices/**/infiniband/mlx4_0/diag_counters"))
    n = len([f for f in diag.iterdir() if f.name != "clear_diag"])
    problems = [p for p in _read("sysfs-infiniband", tree).problems if "diag_counters" in p]
    assert problems == [f"mlx4_0: diag_counters/: {n} counters not read (mlx4 per-device QP error and overflow "
                        "diagnostics, no canonical metric)"]


@pytest.mark.parametrize("name", ["ibm-h100-vsi-nccl-topo", "a100-nccl-source-notes-cut"])
def test_nccl_topo_nvlinks_are_said(name: str) -> None:
    raw = FIXTURES / f"pcie/{name}/topo.xml"
    n = raw.read_text().count("<nvlink ")
    lines = [p for p in _read("nccl-topo", raw).problems if "<nvlink>" in p]
    assert n > 0 and len(lines) == 1 and lines[0].startswith(f"{n} <nvlink> entries not read")
    first = re.search(r'<nvlink target="([^"]+)" count="(\d+)"', raw.read_text())
    assert first is not None and f"gpu0 -> {first.group(1)} x{first.group(2)}" in lines[0]


def test_nccl_topo_net_speed_is_the_nics_line_rate() -> None:
    raw = FIXTURES / "pcie/ibm-h100-vsi-nccl-topo/topo.xml"
    nets = re.findall(r'<net name="([^"]+)"[^>]* speed="(\d+)"', raw.read_text())
    got = _values(_read("nccl-topo", raw))
    assert len(nets) == 8
    assert {(f"h1:{n}", "speed_bps"): int(mbps) * 1e6 for n, mbps in nets}.items() <= got.items()


def test_a_counter_file_that_is_not_a_count_and_device_wide_hw_counters_are_said(tmp_path: Path) -> None:
    tree = tmp_path / "sys"
    shutil.copytree(IB_TREE, tree)
    mlx5 = tree / "class/infiniband/mlx5_0"
    (mlx5 / "ports/1/counters/symbol_error").write_text("N/A (no PMA)\n")
    (mlx5 / "hw_counters").mkdir()
    (mlx5 / "hw_counters/num_qps").write_text("0\n")
    problems = _read("sysfs-infiniband", tree).problems
    assert "mlx5_0/1: 1 files not a count, not read: counters/symbol_error" in problems
    assert ("mlx5_0: hw_counters/: 1 counters not read (device-wide RDMA counters; each port's hw_counters/ is "
            "read)") in problems
