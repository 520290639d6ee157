"""One nccl-tests / rccl-tests run as read so far, and the parsed-run dict it becomes.

The text and the JSON readers both fill a :class:`RunBuilder`; :meth:`RunBuilder.finish` derives
what the output only implies (rank and node counts, the library, the total of wrong elements) the
same way for both. Standard library only: the importers run where the agent runs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TypedDict


class Row(TypedDict):
    size_bytes: int
    count: int
    type: str
    redop: str | None  # None where the output has no redop column (pre-2.13 all_gather, sendrecv)
    root: int | None  # None where it has no root column (pre-2.13 outputs other than broadcast/reduce)
    placement: str  # "out_of_place" | "in_place"
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None  # None: "N/A", -c 0, or the pre-2.13 "error" column (a deviation, not a count)


class Device(TypedDict):
    rank: int
    group: int | None
    pid: int | None
    host: str
    device: int
    bus_id: str
    name: str | None  # None where the line prints none (some rccl-tests)


class ParsedRun(TypedDict):
    op: str | None
    library: str | None
    started_at: float | None
    ranks: int | None
    nodes: int | None
    threads: int | None
    gpus_per_thread: int | None
    versions: dict[str, str]
    command: str | None
    devices: list[Device]
    rows: list[Row]
    avg_busbw_gbps: float | None
    wrong_total: int | None
    source: str
    problems: list[str]


MAX_PROBLEMS = 100
MAX_VERSION = 128  # characters kept of a version string, MAX_COMMAND of the echoed command line
MAX_COMMAND = 4096
OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv",
       "gather", "scatter", "hypercube")
# Spellings seen in binary and file names, with "_" and "-" removed; longest first so that
# "reducescatter" is not read as "reduce".
_NAME_ALIASES = sorted(((op.replace("_", ""), op) for op in OPS), key=lambda a: -len(a[0]))
_BINARY = re.compile(r"(?<![A-Za-z0-9])([a-z_]+?)_perf(?:_mpi)?\b")
_RCCL_HINT = re.compile(r"\b(AMD|Instinct|Radeon|MI\d{3}X?)\b")
_NVIDIA_HINT = re.compile(r"\b(NVIDIA|Tesla|GeForce|Quadro|[ABHL]\d{2,3}[A-Z]?|G[HB]\d{3})\b")


def op_from_binary(text: str) -> str | None:
    """The op of the first ``<op>_perf`` binary named in ``text`` (``alltoall_perf_mpi`` -> alltoall)."""
    for m in _BINARY.finditer(text):
        if m.group(1) in OPS:
            return m.group(1)
    return None


def op_from_name(name: str) -> str | None:
    """The op a file name suggests: ``all_reduce_perf-16r.txt``, ``nccl_allreduce.log``."""
    flat = PurePath(name).name.lower().replace("_", "").replace("-", "")
    if "alltoallv" in flat:  # a different test (per-peer counts); no busbw baseline of its own
        return None
    return next((op for alias, op in _NAME_ALIASES if alias in flat), None)


def nccl_code_version(code: int) -> str:
    """NCCL_VERSION_CODE -> "2.29.3" (the encoding changed at 2.9: 2.8.4 is 2804, 2.29.3 is 22903)."""
    if code >= 20900:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def finite(value: str) -> float:
    """A float token of the output; ValueError for "nan"/"inf" (a run that measured nothing)."""
    f = float(value)
    if not math.isfinite(f):
        raise ValueError(f"not a finite number: {value}")
    return f


@dataclass
class RunBuilder:
    source: str
    threads: int | None = None
    gpus: int | None = None
    validation: int | None = None
    devices: list[Device] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    command: str | None = None
    op: str | None = None  # what the output itself says
    avg: float | None = None
    oob: int | None = None
    footer: bool = False
    finished: bool = False
    started_at: float | None = None
    hints: str = ""  # device names and version lines, for telling NCCL from RCCL
    ranks_per_device: int = 1  # JSON lists each process's first device only
    nccl_ranks: int | None = None  # "nranks N" of NCCL_DEBUG=INFO init lines: NCCL's own count
    launch_ranks: int | None = None  # the launcher's process count x the binary's -t x -g
    problems: list[str] = field(default_factory=list)

    def recognised(self) -> bool:
        return bool(self.threads is not None or self.devices or self.rows or self.footer
                    or "nccl_tests" in self.versions or "rccl_tests" in self.versions)

    def finish(self, op: str | None = None) -> ParsedRun:
        """The parsed run. The op is the binary the output names, else ``op`` (the user's word), else
        the one the file name suggests."""
        problems = list(self.problems)
        if len(problems) > MAX_PROBLEMS:  # a log of another program read as a table must not become the body
            problems[MAX_PROBLEMS - 1:] = [f"... and {len(problems) - MAX_PROBLEMS + 1} more lines not read"]
        run_op = self.op or op or op_from_name(self.source)
        if run_op is None:
            problems.append("op unknown: the output and the file name name no <op>_perf binary (give --op)")
        devices = self._unique_devices(problems)
        ranks: int | None = None
        if devices:
            listed = sorted({d["rank"] for d in devices})
            ranks = listed[-1] + self.ranks_per_device
            if len(listed) * self.ranks_per_device != ranks:
                problems.append(f"device lines list {len(listed)} of ranks 0..{ranks - 1} (lines elided or cut); "
                                f"ranks taken as {ranks}")
        elif self.nccl_ranks is not None:
            ranks = self.nccl_ranks
            problems.append(f"no device lines: ranks taken from NCCL's init lines (nranks {ranks})")
        elif self.launch_ranks is not None:
            ranks = self.launch_ranks
            problems.append(f"no device lines: ranks taken from the command line (processes x -t x -g = {ranks}); "
                            "a guess, confirm with the run's device lines")
        elif self.threads is not None and self.gpus is not None:
            ranks = self.threads * self.gpus
            problems.append(f"no device lines: ranks taken as nThread*nGpus = {ranks} (one process); a guess, "
                            "confirm with the run's device lines")
        else:
            problems.append("rank count unknown: no device lines, no nThread/nGpus header and no command line")
        if not self.rows:
            problems.append("no result rows")
        elif not self.footer:
            problems.append("no '# Out of bounds values' / '# Avg bus bandwidth' footer: the output may be cut")
        known = [r["wrong"] for r in self.rows if r["wrong"] is not None]
        wrong_total: int | None = None
        if known:
            wrong_total = sum(known) or (self.oob or 0)
        elif self.validation != 0 and self.oob is not None:
            wrong_total = self.oob  # pre-2.13 outputs count failed checks only in the footer
        return ParsedRun(
            op=run_op, library=self._library(), started_at=self.started_at, ranks=ranks,
            nodes=len({d["host"] for d in devices}) if devices else None, threads=self.threads,
            gpus_per_thread=self.gpus, versions=dict(self.versions), command=self.command, devices=devices,
            rows=list(self.rows), avg_busbw_gbps=self.avg, wrong_total=wrong_total, source=self.source,
            problems=problems)

    def _unique_devices(self, problems: list[str]) -> list[Device]:
        seen: dict[tuple[int, str], Device] = {}
        for d in self.devices:
            key = (d["rank"], d["host"])
            if key not in seen:
                seen[key] = d
        ranks = [r for r, _ in seen]
        if len(set(ranks)) != len(ranks):
            problems.append("the same rank is listed on several hosts (separate runs printed together?)")
        return sorted(seen.values(), key=lambda d: (d["rank"], d["host"]))

    def _library(self) -> str | None:
        if "rccl" in self.versions or "rccl_tests" in self.versions or _RCCL_HINT.search(self.hints):
            return "rccl"
        if "nccl" in self.versions or "nccl_tests" in self.versions or _NVIDIA_HINT.search(self.hints):
            return "nccl"
        return None
