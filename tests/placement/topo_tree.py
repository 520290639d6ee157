"""The sysfs tree that an NCCL topology dump (``NCCL_TOPO_DUMP_FILE``) describes, for the PCIe reader.

NCCL writes that XML from sysfs (src/graph/xml.cc, ncclTopoGetXmlFromSys): each ``<pci>`` is a PCI
function, nested as on the PCIe tree, under the ``<cpu numaid=...>`` of its NUMA node, with
``link_speed``/``link_width`` read from ``max_link_speed``/``max_link_width``; ``<net name=...>``
under ``<nic>`` names the RDMA device, ``<gpu>`` marks a GPU. This writes exactly those facts back
where sysfs keeps them and nothing else:
- ``devices/pci<domain>:<bus>/<bdf>/...``: a function at the top of a ``<cpu>`` is on that root bus
  (its own bus number), the others nest under their parent as in the XML;
- per function ``numa_node`` (the cpu's numaid), ``class``, ``vendor``/``device`` where given,
  ``max_link_speed``/``max_link_width`` (the recorded text, ``0`` widths included);
- ``bus/pci/devices/<bdf>`` and ``class/infiniband/<net name>/device`` links;
- ``devices/system/node/node<numaid>/cpulist`` from the cpu's ``affinity`` mask.
``current_link_*`` are not written: the dump does not have them.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path


def _mask_to_cpus(mask: str) -> list[int]:
    value = int(mask.replace(",", ""), 16)
    return [i for i in range(value.bit_length()) if value >> i & 1]


def _cpulist(cpus: list[int]) -> str:
    out: list[list[int]] = []
    for c in cpus:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in out)


def build(xml_path: Path, root: Path) -> dict[str, dict[str, str]]:
    """Write the tree under ``root``; returns per GPU (``gpu<dev>``) its PCI address and the RDMA
    device under the same parent bridge (the pairing the dump shows): ``{"gpu0": {"pci", "nic"}}``."""
    tree = ET.parse(xml_path).getroot()
    for cpu in tree.iter("cpu"):
        numa = cpu.get("numaid", "-1")
        node = root / "devices" / "system" / "node" / f"node{numa}"
        node.mkdir(parents=True, exist_ok=True)
        if cpu.get("affinity"):
            (node / "cpulist").write_text(_cpulist(_mask_to_cpus(cpu.get("affinity", "0"))) + "\n")
        for top in cpu.findall("pci"):
            domain, bus = top.get("busid", "").lower().split(":")[:2]
            _write(top, root / "devices" / f"pci{domain}:{bus}", root, numa)
    parent = {c: p for p in tree.iter() for c in p}
    pairs: dict[str, dict[str, str]] = {}
    for el in tree.iter("pci"):
        gpu = el.find("gpu")
        if gpu is None:
            continue
        nics = [n.get("name", "") for sib in parent[el].findall("pci") for n in sib.iter("net")]
        pairs[f"gpu{gpu.get('dev')}"] = {"pci": el.get("busid", "").lower(), "nic": nics[0] if nics else ""}
    return pairs


def _write(el: ET.Element, parent: Path, root: Path, numa: str) -> None:
    bdf = el.get("busid", "").lower()
    here = parent / bdf
    here.mkdir(parents=True, exist_ok=True)
    (here / "numa_node").write_text(numa + "\n")
    for attr, name in (("class", "class"), ("vendor", "vendor"), ("device", "device"),
                       ("link_speed", "max_link_speed"), ("link_width", "max_link_width")):
        if el.get(attr) is not None:
            (here / name).write_text(el.get(attr, "") + "\n")
    links = root / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(here, links), links / bdf)
    nic = el.find("nic")
    for net in nic.findall("net") if nic is not None else []:
        ib = root / "class" / "infiniband" / net.get("name", "")
        ib.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(here, ib), ib / "device")
    for child in el.findall("pci"):
        _write(child, here, root, numa)
