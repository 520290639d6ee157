"""PCIe link state of a host's NICs and GPUs as samples, from the two recordings that carry it:
a sysfs tree (``fabricscope parse /sys`` or a copy of one) and an NCCL topology dump
(``NCCL_TOPO_DUMP_FILE``). Registered with ``fabricscope parse`` (collectors/formats).

Canonical metrics (docs/API.md): ``pcie_link_generation``, ``pcie_link_width`` (the link now) and
``pcie_link_generation_max``, ``pcie_link_width_max``. Sources: ``device:<nic>`` (RDMA device, else
interface name) and, from an NCCL dump, ``device:gpu<N>`` with N NCCL's CUDA device index. A
width of 0 (virtual functions) or an unknown speed is left out. An NCCL dump's ``<net speed>`` is also the NIC's
``speed_bps``; its ``<nvlink>`` entries are said, not read (no canonical metric).
"""

from __future__ import annotations

import contextlib
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from fabricscope.collectors.formats import Format, Reading
from fabricscope.collectors.host import pcie
from fabricscope.core.errors import ParseError
from fabricscope.core.model import Sample, now

# PcieLink field -> canonical metric (a table, so both formats name them the same way).
LINK_METRICS = (("gen", "pcie_link_generation"), ("width", "pcie_link_width"),
                ("max_gen", "pcie_link_generation_max"), ("max_width", "pcie_link_width_max"))


def link_samples(link: pcie.PcieLink, source: str, ts: float) -> list[Sample]:
    return [Sample(ts, source, metric, float(getattr(link, field)))
            for field, metric in LINK_METRICS if getattr(link, field) is not None]


def _read_sysfs(path: Path, device: str, ts: float) -> Reading:
    out = Reading()
    seen: set[str] = set()  # an RDMA device and its netdev share a PCI function: report it once
    names = [("infiniband", n) for n in pcie.rdma_devices(path)]
    with contextlib.suppress(OSError):  # no class/net: the RDMA devices alone
        names += [("net", p.name) for p in sorted((path / "class" / "net").iterdir())]
    for cls, name in names:
        dev = pcie.device_at(path, path / "class" / cls / name / "device")
        if dev is None or dev.pci in seen:
            continue
        seen.add(dev.pci)
        out.samples.extend(link_samples(dev.link, f"{device}:{name}", ts))
    return out


def _looks_like_sysfs(path: Path, _head: str) -> bool:
    return (path / "class" / "net").is_dir() and (path / "devices").is_dir()


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# PCI class code (its first two bytes) -> what NCCL would have put under the <pci>: vendors' hand-made topology
# files (NCCL_TOPO_FILE) name their devices by class alone, with no <gpu>/<nic> element.
PCI_CLASS_KIND = {"0x0300": "GPU", "0x0302": "GPU", "0x0200": "NIC", "0x0207": "NIC"}
_BRIDGE_CLASS = "0x0604"


def _topo_sources(el: ET.Element, device: str) -> tuple[str, list[str]]:
    """What one <pci> holds (GPU, NIC, bridge, "" for unknown) and the sources its link is reported under: NCCL's
    ``gpu<dev>`` / net names where its dump has them, else the PCI bus id (all a class-only device has)."""
    gpu = el.find("gpu")
    if gpu is not None:
        return "GPU", [f"{device}:gpu{gpu.get('dev')}"] if gpu.get("dev") else []
    nic = el.find("nic")
    if nic is not None:
        return "NIC", [f"{device}:{n.get('name')}" for n in nic.findall("net") if n.get("name")]
    klass = (el.get("class") or "")[:6].lower()
    if klass == _BRIDGE_CLASS or el.find("pci") is not None:
        return "bridge", []
    kind = PCI_CLASS_KIND.get(klass, "")
    return kind, [f"{device}:{el.get('busid')}"] if kind and el.get("busid") else []


def _read_nccl_topo(path: Path, device: str, ts: float) -> Reading:
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise ParseError(f"{path}: not an NCCL topology XML: {exc}") from exc
    if root.tag != "system":
        raise ParseError(f"{path}: not an NCCL topology XML (root <{root.tag}>, expected <system>)")
    out = Reading()
    by_class: list[str] = []
    no_link: list[str] = []
    unknown: list[str] = []
    for el in root.iter("pci"):
        kind, sources = _topo_sources(el, device)
        busid = el.get("busid") or "?"
        # NCCL writes max_link_speed / max_link_width there (src/graph/xml.cc, ncclTopoGetXmlFromSys).
        width = _int_or_none(el.get("link_width"))
        link = pcie.PcieLink(max_gen=pcie.gen_of(el.get("link_speed")), max_width=width if width else None)
        if kind == "bridge":
            continue
        if not kind:
            if el.get("link_speed") or el.get("link_width"):
                unknown.append(busid)
            continue
        if el.find("gpu") is None and el.find("nic") is None:
            by_class.append(f"{kind} {busid}")
        if el.get("link_speed") and link.max_gen is None:
            out.problems.append(f"pci {busid}: link_speed {el.get('link_speed')!r} not understood")
        elif link.max_gen is None and link.max_width is None:
            no_link.append(f"{kind} {busid}")
        for source in sources:
            out.samples.extend(link_samples(link, source, ts))
    out.samples.extend(_net_speeds(root, device, ts))
    out.problems.extend(_topo_problems(root, by_class, no_link, unknown))
    return out


def _net_speeds(root: ET.Element, device: str, ts: float) -> list[Sample]:
    """``<net speed>``: the port's line rate in Mb/s as NCCL read it (ibv port attributes, or the netdev's
    ``speed``), the ``speed_bps`` sysfs-net and sysfs-infiniband give the same NIC. A name listed twice keeps
    its first speed."""
    speeds: dict[str, float] = {}
    for net in root.iter("net"):
        mbps = _int_or_none(net.get("speed"))
        if net.get("name") and mbps and mbps > 0:
            speeds.setdefault(net.get("name", ""), mbps * 1e6)
    return [Sample(ts, f"{device}:{name}", "speed_bps", bps) for name, bps in speeds.items()]


def _topo_problems(root: ET.Element, by_class: list[str], no_link: list[str], unknown: list[str]) -> list[str]:
    out = []
    if by_class:
        out.append(f"{len(by_class)} devices named by PCI class only (no <gpu>/<nic> element, as in a hand-made "
                   f"NCCL_TOPO_FILE): their links reported under their bus ids ({', '.join(by_class[:4])}, ...)")
    if no_link:
        out.append(f"{len(no_link)} devices without a PCIe link speed or width (a VM's virtual PCI?): "
                   f"{', '.join(no_link[:4])}{', ...' if len(no_link) > 4 else ''}")
    if unknown:
        out.append(f"{len(unknown)} PCI devices with a link but no class and no <gpu>/<nic> element: not read "
                   f"({', '.join(unknown[:4])}{', ...' if len(unknown) > 4 else ''})")
    stray = [n.get("name") or "?" for cpu in root.iter("cpu") for nic in cpu.findall("nic") for n in nic.findall("net")]
    if stray:
        out.append(f"NIC {', '.join(stray)} not under a <pci>: no PCIe link to read")
    nvlinks = [f"gpu{gpu.get('dev', '?')} -> {nv.get('target', '?')} x{nv.get('count', '?')}"
               for gpu in root.iter("gpu") for nv in gpu.iter("nvlink")]
    if nvlinks:  # GPU<->GPU/NVSwitch lanes: no PCIe link, and no canonical metric or link kind for them
        out.append(f"{len(nvlinks)} <nvlink> entries not read (NVLink peers and lane counts have no canonical "
                   f"metric): {', '.join(nvlinks[:4])}{', ...' if len(nvlinks) > 4 else ''}")
    bare = [el.get("busid") or "?" for el in root.iter("pci") if not el.attrib.keys() - {"busid"}]
    if bare:
        out.append(f"{len(bare)} <pci> entries carry a bus id only (no class, no link): not read")
    return out


_XML_PREAMBLE = re.compile(r"\s*(<\?xml[^>]*>\s*)?(<!--.*?-->\s*)*<system version=", re.S)


def _looks_like_nccl_topo(_path: Path, head: str) -> bool:
    # vendors' topology files open with a licence comment before <system>
    return _XML_PREAMBLE.match(head) is not None


class PcieLinkCollector:
    """The host agent's view of the same facts: every NIC's PCIe link now and at most, from sysfs.

    Not wired into the agent's configuration here (collectors/host/agent.py builds its collectors):
    a link trains once, so a slow interval (minutes) is plenty."""

    name = "pcie"

    def __init__(self, host: str, *, sys_root: str | Path = "/sys") -> None:
        self.host, self.sys_root = host, Path(sys_root)

    def poll(self) -> list[Sample]:
        return _read_sysfs(self.sys_root, self.host, now()).samples


FORMATS = (
    Format("sysfs-pcie", "a /sys tree: PCIe link now and at most of every NIC (class/infiniband, class/net)",
           sniff=_looks_like_sysfs, read=_read_sysfs, directory=True, priority=200),
    Format("nccl-topo", "NCCL topology dump (NCCL_TOPO_DUMP_FILE): PCIe link maximum of its GPUs and NICs, NIC speeds",
           sniff=_looks_like_nccl_topo, read=_read_nccl_topo),
)
