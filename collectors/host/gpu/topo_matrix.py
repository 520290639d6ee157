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
The header line may carry terminal underline escapes (``ESC[4m``), which are dropped. Cells are placed
by the header: tab-separated cells by their index, space-aligned ones by the header column they start
under, and matrix cells must be connection tokens (X, PIX, PXB, PHB, NODE, SYS, SOC, NV#). On narrow
columns nvidia-smi prints a cell and the next column with no space between them (``PHB0-31``): such a
cell is split at the token, and said in ``problems``. A cell that cannot be placed is a problem too;
the rest of its row is left unplaced rather than shifted into the wrong columns.
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
    problems: list[str] = field(default_factory=list)
    guesses: list[str] = field(default_factory=list)  # a column layout inferred, and how to confirm it

    def link(self, a: str, b: str) -> str | None:
        return self.matrix.get((a, b))

    def nearest_nics(self, gpu: str) -> list[str]:
        """The NICs (by RDMA device name) at the closest connection type from ``gpu``."""
        conns = {nic: self.matrix[(gpu, nic)] for nic in self.nics if (gpu, nic) in self.matrix}
        if not conns:
            return []
        best = min(rank(c) for c in conns.values())
        return [self.nic_names.get(n, n) for n, c in conns.items() if rank(c) == best]


_TOKEN = re.compile(r"(X|PIX|PXB|PHB|NODE|SYS|SOC|NV\d+)")
_CPUS = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*|N/A")


def _cells(line: str) -> list[str] | None:
    """A line's cells in nvidia-smi's own column order, empty cells kept: split at tabs; a space-aligned
    paste (tabs expanded to 8-column stops) is split back at the stops it crossed. None when the paste is
    aligned some other way (its empty cells cannot be told)."""
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    found = [(m.start(), m.group(0)) for m in re.finditer(r"\S+(?: \S+)*", line)]
    cells: list[str] = []
    expected = 0  # the tab stop the next cell starts at when one tab separates them
    for at, cell in found:
        if cell == "X" and at % 8 == 1:
            at -= 1  # nvidia-smi prints the diagonal as " X "
        if at % 8 or at < expected:
            return None
        cells += [""] * ((at - expected) // 8)  # each further stop crossed is one more tab: an empty cell
        cells.append(cell)
        expected = ((at + len(cell)) // 8 + 1) * 8
    return cells


def _split_run_together(cell: str) -> tuple[str, str] | None:
    """``PHB0-31`` -> (``PHB``, ``0-31``); None when the cell is one token or cannot be split surely."""
    m = _TOKEN.match(cell)
    if m is None or m.end() == len(cell):
        return None
    rest = cell[m.end():]
    if m.group(0).startswith("NV") and rest[:1].isdigit():
        return None  # NV12 + 0-31 or NV1 + 20-31: cannot tell
    return (m.group(0), rest) if _CPUS.fullmatch(rest) else None


def parse_topo_matrix(text: str) -> TopoMatrix:
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    try:
        header_at = next(i for i, ln in enumerate(lines) if re.match(r"^\s*GPU0(\s|$)", ln))
    except StopIteration:
        raise ParseError("nvidia-smi topo -m: no header line starting with GPU0") from None
    head = _cells(lines[header_at]) or re.split(r"\s{2,}", lines[header_at].strip())
    head = [c for c in head if c]
    devices = [c for c in head if c not in _AFFINITY_COLUMNS]
    extra = [c for c in head if c in _AFFINITY_COLUMNS]
    gpus = tuple(d for d in devices if d.startswith("GPU"))
    nics = tuple(d for d in devices if not d.startswith("GPU"))
    matrix: dict[tuple[str, str], str] = {}
    cpu: dict[str, str | None] = {}
    numa: dict[str, str | None] = {}
    problems: list[str] = []
    guessed: list[str] = []
    for line in lines[header_at + 1:]:
        if not line.strip() or line.startswith("Legend"):
            break
        cells = _cells(line)
        if cells is None:  # aligned some other way: words in order, empty cells unknowable
            cells = line.split()
            guessed.append(cells[0])
        row, values = cells[0], cells[1:]
        if not _DEVICE.match(row):
            raise ParseError(f"nvidia-smi topo -m: unexpected row {row!r}")
        placed = True
        for i, col in enumerate(devices):
            cell = values[i] if i < len(values) else None
            if cell is None:
                problems.append(f"{row}: no cell under {col} (line cut?); not placed")
                placed = False
                break
            if _TOKEN.fullmatch(cell):
                matrix[(row, col)] = cell
                continue
            split = _split_run_together(cell)
            if split is None:
                problems.append(f"{row}: cell {cell!r} under {col} is not a connection type; the rest of the "
                                "row is not placed")
                placed = False
                break
            matrix[(row, col)] = split[0]
            values[i:i + 1] = list(split)  # the next column's value was printed with no gap
            problems.append(f"{row}: cell {cell!r} under {col} ran into the next column: read as "
                            f"{split[0]!r} and {split[1]!r}")
        if not row.startswith("GPU") or not placed:
            continue
        rest = values[len(devices):]
        if len(rest) == len(extra) + 1 and extra[-1:] == ["GPU NUMA ID"] and rest[-2] == "":
            del rest[-2]  # nvidia-smi prints two tabs before the GPU NUMA ID value
        tail = dict(zip(extra, rest, strict=False))
        if any(rest[len(extra):]):
            problems.append(f"{row}: cells past the last column not placed: {rest[len(extra):]}")
        for col, out in (("CPU Affinity", cpu), ("NUMA Affinity", numa)):
            value = _present(tail.get(col))
            if value is not None and not _CPUS.fullmatch(value):
                problems.append(f"{row}: {col} {value!r} is not a CPU/node list: absent")
                value = None
            out[row] = value
    rows_seen = {row for row, _col in matrix}
    missing = [d for d in devices if d not in rows_seen and not any(p.startswith(f"{d}:") for p in problems)]
    if missing:  # a paste cut short: the columns name devices whose own rows never came
        problems.append(f"no row for {', '.join(missing)} (output cut?): their links to each other are unknown")
    guesses = [f"rows {', '.join(guessed)}: columns neither tab-separated nor on tab stops: cells read in header "
               "order (an empty affinity cell would shift the ones after it); confirm with the output as "
               "nvidia-smi writes it (`nvidia-smi topo -m > file`, tabs kept)"] if guessed else []
    names = {m.group(1): m.group(2) for m in re.finditer(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.M)}
    return TopoMatrix(gpus, nics, matrix, cpu, numa, {n: names.get(n, n) for n in nics}, problems, guesses)


def _present(value: str | None) -> str | None:
    return None if value in (None, "", "N/A") else value


def looks_like_topo(head: str) -> bool:
    """A header line naming GPU0 and the CPU Affinity column, then a row of GPU0 (a paste may be cut
    before the Legend)."""
    clean = _ANSI.sub("", head)
    return bool(re.search(r"^\s*GPU0\b.*CPU Affinity.*\n(?:.*\n)*?\s*GPU0\s", clean, re.M))
