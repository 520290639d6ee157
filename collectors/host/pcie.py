"""GPU-to-NIC locality from sysfs: NUMA node, PCIe path and link state of a device, and where a
process may run (CPU affinity, memory nodes) and which NUMA node each CPU belongs to.

Pure reads of a filesystem whose roots (``/sys``, ``/proc``) are injected, so tests walk the
recorded sysfs trees of real servers. Standard library only: the training hook calls it at start.
Missing values are absent (None / left out), never -1: ``numa_node`` is -1 on machines without
NUMA information (VMs), and virtual functions report a link width of 0; both mean "unknown".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A PCI function address as sysfs names it: domain:bus:device.function.
_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# A host bridge (root complex) directory: pci<domain>:<bus>.
_HOST_BRIDGE = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")
# PCIe generation from the per-lane rate sysfs prints ("16.0 GT/s PCIe", "8 GT/s", "2.5 GT/s").
GT_S_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


@dataclass(frozen=True)
class PcieLink:
    gen: int | None = None
    width: int | None = None
    max_gen: int | None = None
    max_width: int | None = None

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in (("gen", self.gen), ("width", self.width), ("max_gen", self.max_gen),
                                  ("max_width", self.max_width)) if v is not None}


@dataclass(frozen=True)
class PcieDevice:
    """One PCI function and the chain of bridges above it, host bridge first."""

    pci: str
    numa: int | None
    path: tuple[str, ...] = ()  # e.g. ("pci0000:00", "0000:00:01.0", "0000:01:00.0"), the device itself excluded
    link: PcieLink = field(default_factory=PcieLink)

    @property
    def root(self) -> str | None:
        """The host bridge (root complex) the device hangs off."""
        return self.path[0] if self.path and _HOST_BRIDGE.match(self.path[0]) else None

    @property
    def root_port(self) -> str | None:
        bridges = self.bridges
        return bridges[0] if bridges else None

    @property
    def bridges(self) -> tuple[str, ...]:
        return tuple(p for p in self.path if _BDF.match(p))

    @property
    def switches(self) -> tuple[str, ...]:
        """Bridges below the root port: the ports of PCIe switches on the way down."""
        return self.bridges[1:]


def gen_of(speed: str | None) -> int | None:
    """``"16.0 GT/s PCIe"`` -> 4; None for "Unknown" and anything unparsable."""
    if not speed:
        return None
    m = re.match(r"\s*([0-9.]+)\s*GT/s", speed)
    if not m:
        return None
    try:
        return GT_S_TO_GEN.get(float(m.group(1)))
    except ValueError:
        return None


def parse_cpulist(text: str | None) -> list[int]:
    """``"0-3,8,10-11"`` -> [0, 1, 2, 3, 8, 10, 11]; [] for empty or malformed text."""
    out: list[int] = []
    for part in (text or "").strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def _positive(text: str | None) -> int | None:
    value = _int(text)
    return value if value is not None and value > 0 else None


def _numa(text: str | None) -> int | None:
    value = _int(text)
    return value if value is not None and value >= 0 else None


def device_at(sysfs_root: str | Path, link: Path) -> PcieDevice | None:
    """The PCI function behind ``link`` (a ``device`` symlink, or a ``bus/pci/devices`` entry).

    The link may resolve below the PCI function (virtio-net's ``device`` is ``.../0000:00:03.0/virtio2``):
    the nearest PCI address on the way up is the function."""
    devices = Path(sysfs_root) / "devices"
    try:
        real = Path(os.path.realpath(link))
        rel = real.relative_to(os.path.realpath(devices))
    except (OSError, ValueError):  # not there, or not under <root>/devices (a virtual device)
        return None
    parts = list(rel.parts)
    while parts and not _BDF.match(parts[-1]):
        parts.pop()
    if not parts:
        return None
    pci = parts[-1]
    here = devices.joinpath(*parts)
    link_state = PcieLink(
        gen=gen_of(_read(here / "current_link_speed")), width=_positive(_read(here / "current_link_width")),
        max_gen=gen_of(_read(here / "max_link_speed")), max_width=_positive(_read(here / "max_link_width")))
    return PcieDevice(pci=pci.lower(), numa=_numa(_read(here / "numa_node")),
                      path=tuple(p for p in parts[:-1] if _BDF.match(p) or _HOST_BRIDGE.match(p)),
                      link=link_state)


def gpu_device(pci: str, sysfs_root: str | Path = "/sys") -> PcieDevice | None:
    """A GPU (or any PCI function) by its address; ``00000000:3B:00.0`` (NVML's form) is accepted."""
    addr = normalize_bdf(pci)
    if addr is None:
        return None
    return device_at(sysfs_root, Path(sysfs_root) / "bus" / "pci" / "devices" / addr)


def nic_device(name: str, sysfs_root: str | Path = "/sys") -> PcieDevice | None:
    """A NIC by its RDMA device name (``mlx5_0``) or its interface name (``eth0``)."""
    root = Path(sysfs_root)
    for cls in ("infiniband", "net"):
        dev = device_at(root, root / "class" / cls / name / "device")
        if dev is not None:
            return dev
    return None


def normalize_bdf(pci: str) -> str | None:
    """``00000000:3B:00.0`` -> ``0000:3b:00.0``; None if it is not a PCI address."""
    pci = pci.strip().lower()
    if not _BDF.match(pci):
        return None
    domain, rest = pci.split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def rdma_devices(sysfs_root: str | Path = "/sys") -> list[str]:
    try:
        return sorted(p.name for p in (Path(sysfs_root) / "class" / "infiniband").iterdir())
    except OSError:
        return []


def cpu_nodes(sysfs_root: str | Path = "/sys") -> dict[int, int]:
    """CPU -> NUMA node, from ``devices/system/node/node*/cpulist``."""
    out: dict[int, int] = {}
    base = Path(sysfs_root) / "devices" / "system" / "node"
    try:
        nodes = [p for p in base.iterdir() if re.fullmatch(r"node\d+", p.name)]
    except OSError:
        return out
    for node in nodes:
        for cpu in parse_cpulist(_read(node / "cpulist")):
            out[cpu] = int(node.name[4:])
    return out


def process_affinity(proc_root: str | Path = "/proc", pid: str = "self") -> tuple[list[int], list[int]]:
    """(CPUs the process may run on, memory nodes it may allocate from) from ``/proc/<pid>/status``."""
    cpus: list[int] = []
    mems: list[int] = []
    for line in (_read(Path(proc_root) / pid / "status") or "").splitlines():
        key, _, value = line.partition(":")
        if key == "Cpus_allowed_list":
            cpus = parse_cpulist(value)
        elif key == "Mems_allowed_list":
            mems = parse_cpulist(value)
    return cpus, mems


def compact(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> ``"0-2,5"`` (the cpulist form, short enough to store per rank)."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in runs)


def _device_facts(prefix: str, dev: PcieDevice | None) -> dict[str, Any]:
    if dev is None:
        return {}
    out: dict[str, Any] = {f"{prefix}_pci": dev.pci, f"{prefix}_pcie_path": list(dev.path)}
    if dev.numa is not None:
        out[f"{prefix}_numa"] = dev.numa
    link = dev.link.as_dict()
    if link:
        out[f"{prefix}_link"] = link
    return out


def locality(*, gpu_pci: str | None = None, nic: str | None = None, sysfs_root: str | Path = "/sys",
             proc_root: str | Path = "/proc", pid: str = "self") -> dict[str, Any]:
    """The ``locality`` object of one rank (docs/API.md, ``PUT /v1/jobs/{job}``); absent facts left out.

    ``cpu_numa`` lists the NUMA nodes of the CPUs the process may run on, so the server can tell a
    rank pinned away from its GPU's node without knowing the host's CPU numbering."""
    out: dict[str, Any] = {}
    if gpu_pci:
        out.update(_device_facts("gpu", gpu_device(gpu_pci, sysfs_root)))
    if nic:
        out.update(_device_facts("nic", nic_device(nic, sysfs_root)))
    cpus, mems = process_affinity(proc_root, pid)
    if cpus:
        out["cpus"] = compact(cpus)
        nodes = cpu_nodes(sysfs_root)
        cpu_numa = sorted({nodes[c] for c in cpus if c in nodes})
        if cpu_numa:
            out["cpu_numa"] = cpu_numa
    if mems:
        out["mem_nodes"] = mems
    return out
