"""``nvidia-smi topo -m``: the GPU/NIC affinity matrix as data.

Use::

    topo = parse_topo_matrix(text)
    topo.gpus                          # ("GPU0", "GPU1", ...)
    topo.nics                          # ("NIC0", ...) or, on older drivers, ("mlx5_0", ...)
    topo.nic_names["NIC0"]             # "mlx5_0" (from the "NIC Legend"; the name itself when none)
    topo.link("GPU0", "NIC0")          # "PIX" | "PXB" | "PHB" | "NODE" | "SYS" | "NV12" | "X"
    topo.cpu_affinity["GPU0"]          # "0-31" (as printed; None when absent)
    topo.numa_affinity["GPU0"]         # "0" (None for "N/A")
    topo.nearest_nics("GPU0")          # the NICs with the closest connection type, by RDMA device name

Connection types, closest first (nvidia-smi's legend): ``NV#`` (a bonded set of # NVLinks, GPU to
GPU), ``PIX`` (at most one PCIe bridge), ``PXB`` (several bridges, no host bridge), ``PHB`` (through a
PCIe host bridge, typically the CPU), ``NODE`` (between host bridges inside a NUMA node), ``SYS``
(across the NUMA interconnect, QPI/UPI). A GPU whose NIC is only ``NODE``/``SYS`` away sends its
RDMA traffic through the CPU: the locality audit flags that.

The recorded outputs are tab-separated, or, once pasted into Markdown, space-aligned; both parse.
The header line may carry terminal underline escapes (``ESC[4m``), which are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricscope.core.errors import ParseError

# Closest first; NV# ranks above every PCIe path (more links = closer).
PCIE_RANK = {"X": 0, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|[a-z]+\d*_\d+|ib\w+)$")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def rank(conn: str) -> int:
    """Sort key of a connection type: lower is closer (NV# ranks 1, ahead of PIX)."""
    return 1 if conn.startswith("NV") else PCIE_RANK.get(conn, 99)


@dataclass(frozen=True)
class TopoMatrix:
    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    matrix: dict[tuple[str, str], str]
    cpu_affinity: dict[str, str | None] = field(default_factory=dict)
    numa_affinity: dict[str, str | None] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)

    def link(self, a: str, b: str) -> str | None:
        return self.matrix.get((a, b))

    def nearest_nics(self, gpu: str) -> list[str]:
        """The NICs (by RDMA device name) at the closest connection type from ``gpu``."""
        conns = {nic: self.matrix[(gpu, nic)] for nic in self.nics if (gpu, nic) in self.matrix}
        if not conns:
            return []
        best = min(rank(c) for c in conns.values())
        return [self.nic_names.get(n, n) for n, c in conns.items() if rank(c) == best]


def _cells(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return re.split(r"\s{2,}", line.strip())


def parse_topo_matrix(text: str) -> TopoMatrix:
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    try:
        header_at = next(i for i, ln in enumerate(lines) if re.match(r"^\s*GPU0(\s|$)", ln))
    except StopIteration:
        raise ParseError("nvidia-smi topo -m: no header line starting with GPU0") from None
    header = [c for c in _cells(lines[header_at]) if c]
    devices = [c for c in header if c not in _AFFINITY_COLUMNS]
    extra = [c for c in header if c in _AFFINITY_COLUMNS]
    gpus = tuple(d for d in devices if d.startswith("GPU"))
    nics = tuple(d for d in devices if not d.startswith("GPU"))
    matrix: dict[tuple[str, str], str] = {}
    cpu: dict[str, str | None] = {}
    numa: dict[str, str | None] = {}
    for line in lines[header_at + 1:]:
        if not line.strip() or line.startswith("Legend"):
            break
        # Tab-separated keeps empty cells; space-aligned cells are single words.
        cells = _cells(line) if "\t" in line else line.split()
        row, values = cells[0], cells[1:]
        if not _DEVICE.match(row):
            raise ParseError(f"nvidia-smi topo -m: unexpected row {row!r}")
        for col, value in zip(devices, values, strict=False):
            matrix[(row, col)] = value
        if row.startswith("GPU"):
            tail = dict(zip(extra, values[len(devices):], strict=False))
            cpu[row] = _present(tail.get("CPU Affinity"))
            numa[row] = _present(tail.get("NUMA Affinity"))
    names = {m.group(1): m.group(2) for m in re.finditer(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.M)}
    return TopoMatrix(gpus, nics, matrix, cpu, numa, {n: names.get(n, n) for n in nics})


def _present(value: str | None) -> str | None:
    return None if value in (None, "", "N/A") else value


def looks_like_topo(head: str) -> bool:
    clean = _ANSI.sub("", head)
    return bool(re.search(r"^\s*GPU0\b.*\n", clean, re.M)) and "Legend:" in clean and "CPU Affinity" in clean
