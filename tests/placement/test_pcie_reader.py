"""collectors/host/pcie.py on recorded sysfs trees of real machines and on this VM's own /sys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fabricscope.collectors.host import pcie
from fabricscope.collectors.training import placement
from tests.placement import topo_tree

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "pcie"
HWLOC = FIXTURES / "hwloc-40intel64-2g2n4c" / "sys"
VM = FIXTURES / "vm-virtio-net"
H100_TOPO = FIXTURES / "ibm-h100-vsi-nccl-topo" / "topo.xml"


def test_hwloc_tree_qib_hca_through_both_class_links() -> None:
    # class/infiniband/qib0 is itself a link into devices/.../infiniband/qib0, whose device link
    # points three levels up: both hops are resolved.
    qib = pcie.nic_device("qib0", HWLOC)
    assert qib == pcie.PcieDevice(pci="0000:43:00.0", numa=2, path=("pci0000:40", "0000:40:03.0"),
                                  link=pcie.PcieLink(gen=3, width=4))
    assert qib.root == "pci0000:40" and qib.root_port == "0000:40:03.0" and qib.switches == ()
    assert pcie.nic_device("ib0", HWLOC) == qib  # the IPoIB netdev of the same HCA
    assert pcie.gpu_device("00000000:43:00.0", HWLOC) == qib  # NVML's 8-digit domain form


def test_hwloc_tree_numa_minus_one_and_missing_link_files_are_absent() -> None:
    eth0 = pcie.nic_device("eth0", HWLOC)
    assert eth0 is not None and eth0.pci == "0000:02:00.0" and eth0.path == ("pci0000:00", "0000:00:05.0")
    assert eth0.numa is None  # numa_node reads -1 there
    assert eth0.link == pcie.PcieLink()
    assert pcie.nic_device("eth9", HWLOC) is None and pcie.gpu_device("not-an-address", HWLOC) is None


def test_hwloc_tree_cpu_nodes() -> None:
    nodes = pcie.cpu_nodes(HWLOC)
    assert len(nodes) == 40
    assert [c for c, n in sorted(nodes.items()) if n == 2] == [2, 6, 10, 14, 18, 22, 26, 30, 34, 38]


def test_nccl_topology_dump_of_an_8_gpu_8_nic_h100_server(tmp_path: Path) -> None:
    pairs = topo_tree.build(H100_TOPO, tmp_path)
    assert len(pairs) == 8
    for i, pair in enumerate(p for _, p in sorted(pairs.items())):
        gpu, nic = pcie.gpu_device(pair["pci"], tmp_path), pcie.nic_device(pair["nic"], tmp_path)
        assert gpu is not None and nic is not None
        assert gpu.numa == nic.numa == (0 if i < 4 else 1)
        assert gpu.path == nic.path and len(gpu.path) == 2  # host bridge and the bridge they share
        assert gpu.link == nic.link == pcie.PcieLink(max_gen=5)  # 32.0 GT/s; the recorded width 0 is unknown
        assert placement.nearest_rdma_device(pair["pci"], tmp_path) == pair["nic"]
    assert pcie.rdma_devices(tmp_path) == [f"mlx5_{i}" for i in range(8)]


def test_recorded_vm_virtio_nic_resolves_to_its_pci_function() -> None:
    # virtio-net's device link ends at .../0000:00:03.0/virtio2: the PCI function is one level up.
    dev = pcie.nic_device("eth0", VM / "sys")
    assert dev == pcie.PcieDevice(pci="0000:00:03.0", numa=None, path=("pci0000:00",))
    assert dev.root == "pci0000:00" and dev.root_port is None


def test_locality_with_process_affinity_from_a_recorded_status() -> None:
    loc = pcie.locality(nic="eth0", sysfs_root=VM / "sys", proc_root=VM / "proc")
    assert loc == {"nic_pci": "0000:00:03.0", "nic_pcie_path": ["pci0000:00"], "cpus": "0-1", "cpu_numa": [0],
                   "mem_nodes": [0]}


@pytest.mark.skipif(not os.path.exists("/sys/class/net/eth0/device"), reason="no eth0 with a device here")
def test_live_sysfs_matches_what_the_kernel_links_say() -> None:
    dev = pcie.nic_device("eth0")
    real = os.path.realpath("/sys/class/net/eth0/device")
    assert dev is not None and f"/{dev.pci}" in real
    assert list(dev.path) == [p for p in real.split("/")[3:] if p.startswith("pci") or p.count(":") == 2][:-1]
    numa = Path(real.split(dev.pci)[0] + dev.pci, "numa_node").read_text().strip()
    assert dev.numa == (None if numa == "-1" else int(numa))


@pytest.mark.parametrize(("text", "cpus"), [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("", []), ("0-x", []),
                                            ("5", [5])])
def test_cpulist(text: str, cpus: list[int]) -> None:
    assert pcie.parse_cpulist(text) == cpus
    if cpus:
        assert pcie.parse_cpulist(pcie.compact(cpus)) == cpus


@pytest.mark.parametrize(("speed", "gen"), [("16.0 GT/s PCIe", 4), ("8 GT/s", 3), ("2.5 GT/s PCIe", 1),
                                            ("Unknown", None), ("", None), ("3.3 GT/s", None)])
def test_generation_from_speed(speed: str, gen: int | None) -> None:
    assert pcie.gen_of(speed) == gen
