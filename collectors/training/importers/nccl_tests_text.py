"""The stdout of nccl-tests and rccl-tests (``all_reduce_perf`` and the others), line by line.

What varies between versions, and how it is read (formats from NVIDIA/nccl-tests src/util.cu,
src/common.cu and their history, ROCm/rccl-tests src/common.cu, and the recordings in
tests/fixtures/nccl-tests/):

- The table's own header line names its columns; rows are read by those names. Before 2.13 there
  is no ``root`` column except for broadcast/reduce, all_gather/sendrecv have no ``redop``, and
  the check column is ``error`` (a maximum deviation, not a count of wrong elements). Some
  versions print an empty redop for alltoall; ``-S`` adds a timestamp, ``-I`` four per-iteration
  columns per placement; rccl-tests ``-O 0`` prints only the in-place group.
- Without a header line a row is still read: 3-5 leading columns then one or two groups of four.
- Device lines: ``#  Rank R Group G Pid P on HOST device D [BUS] NAME``; Group and Pid are absent in
  older versions and some rccl-tests, NAME in some rccl-tests.
- Lines of other programs (NCCL INFO/WARN, mpirun, srun ``N: `` labels) may sit anywhere, even
  inside the table. Inside the table a line that is none of these and not a row is a problem.
- Several runs may follow each other in one file (a loop over the binaries); each
  ``# nThread`` header after a table starts the next run.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, tzinfo

from fabricscope.collectors.training.importers.nccl_tests_run import (
    MAX_COMMAND,
    MAX_VERSION,
    Device,
    Row,
    RunBuilder,
    finite,
    nccl_code_version,
    op_from_binary,
)

_LABEL = re.compile(r"^\s*\d+: ")  # srun --label
_HEADER = re.compile(r"^#?\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\b")
_VALIDATION = re.compile(r"\bvalidation:\s*(\d+)")
_DEVICE = re.compile(r"^#\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)"
                     r"\s+\[([^\]]*)\]\s*(.*?)\s*$")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)(?:\s+\([^)]*\))?\s+nccl-headers=(\d+)"
                            r"\s+nccl-library=(\d+)")
_COLLECTIVE = re.compile(r"Collective test (starting|concluded):\s*(\S+)")
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
_RCCL_VERSION = re.compile(r"\bRCCL version\s*:?\s*(\d+\.\d+\.\d+)(?:\+hip(\d+\.\d+))?")
_RCCL_TESTS = re.compile(r"^rccl-tests: Version (\S+)")
_KEYED = re.compile(r"^(HIP|ROCm) version\s*:\s*(\S+)")
_NRANKS = re.compile(r"\bnranks (\d+)\b")  # NCCL INFO "comm 0x.. rank 0 nranks 16 cudaDev 0 ..."
_PROCS = re.compile(r"(?:^|\s)(?:-np|-n|--np|--ntasks)[\s=]+(\d+)\b")  # mpirun -np, srun -n/--ntasks
_PER_PROC = re.compile(r"(?:^|\s)(?:-g|--ngpus|-t|--nthreads)[\s=]+(\d+)\b")  # nccl-tests -g/-t
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\S+)")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)")
_FAILURE = re.compile(r"Test (?:NCCL |CUDA )?failure|Test timeout")
_NOISE = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b|^# Testing \d+ cycle")
_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}$"), re.compile(r"^\d{2}:\d{2}:\d{2}$")
_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_INT = re.compile(r"^-?\d+$")
_TIME_COLUMNS = ("time", "cputime")
_COLUMN_NAME = re.compile(r"^#?[A-Za-z][A-Za-z0-9_.()/-]*%?$")  # what a column a version adds can be named
_LEAD_COLUMNS = {"size", "count", "type", "redop", "root"}
_CHECKS = ("#wrong", "error")
_GROUP_EXTRAS = {*_CHECKS, "i_min", "i_max", "i_p99", "i_cv%"}  # -I per-iteration columns


@dataclass(frozen=True)
class Layout:
    lead: tuple[str, ...]  # of "size", "count", "type", "redop", "root", and any column a version adds
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # (placement, its column names in order)
    timestamp: bool = False
    guessed: bool = False  # no header line: the columns were placed by their count

    @property
    def width(self) -> int:
        return len(self.lead) + sum(len(names) for _, names in self.groups)

    def unknown(self) -> list[str]:
        """Columns the header names that are not read (a version's extras: algorithm, protocol...)."""
        seen = [c for c in self.lead if c not in _LEAD_COLUMNS]
        seen += [c for _, names in self.groups for c in names[3:] if c not in _GROUP_EXTRAS]
        return list(dict.fromkeys(seen))


def header_layout(tokens: list[str], placement_line: str) -> Layout | None:
    """The layout a ``#  size  count  type ...`` line declares (tokens without the ``#``). Columns are
    placed by the header's names: a column a version adds (before the groups or inside one) is
    carried as a name, skipped when rows are read and listed by :meth:`Layout.unknown`."""
    starts = [i for i, t in enumerate(tokens) if t in _TIME_COLUMNS]
    lead = tokens[:starts[0]] if starts else []
    if lead[:3] != ["size", "count", "type"] or len(set(lead)) != len(lead):
        return None
    if not all(t in _LEAD_COLUMNS or t in _GROUP_EXTRAS or _COLUMN_NAME.match(t) for t in tokens):
        return None  # a token no version prints as a column name: a damaged header, not a new column
    timestamp = tokens[-1] == "timestamp"
    body = tokens[:-1] if timestamp else tokens
    groups = [body[s:e] for s, e in zip(starts, [*starts[1:], len(body)], strict=True)]
    if any(g[1:3] != ["algbw", "busbw"] for g in groups):
        return None
    named = [p.replace("-", "_") for p in re.findall(r"out-of-place|in-place", placement_line)]
    if len(named) != len(groups):
        named = ["out_of_place", "in_place"][:len(groups)] if len(groups) <= 2 else []
    if not named:
        return None
    return Layout(tuple(lead), tuple(zip(named, map(tuple, groups), strict=True)), timestamp)


def _guess_layout(n: int) -> Layout | None:
    """Without a header: 3-5 leading columns, then two groups of four (or one)."""
    for g in (2, 1):
        lead = n - 4 * g
        if 3 <= lead <= 5:
            group = ("time", "algbw", "busbw", "#wrong")
            groups = (("out_of_place", group), ("in_place", group))[:g]
            return Layout(("size", "count", "type", "redop", "root")[:lead], groups, guessed=True)
    return None


def parse_row(tokens: list[str], layout: Layout | None, tz: tzinfo) -> tuple[list[Row], float | None]:
    """The rows of one table line (one per placement) and its timestamp; ValueError if it is not one.
    A line whose column count is not the header's is refused whole: a value is never placed under
    another column's name."""
    stamp: float | None = None
    if layout is not None and layout.timestamp:
        if len(tokens) < 2 or not (_STAMP[0].match(tokens[-2]) and _STAMP[1].match(tokens[-1])):
            raise ValueError("no timestamp at the end")
        stamp = datetime.strptime(" ".join(tokens[-2:]), "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz).timestamp()
        tokens = tokens[:-2]
    layout = layout or _guess_layout(len(tokens))
    if layout is None:
        raise ValueError(f"{len(tokens)} columns")
    names = list(layout.lead)
    width = layout.width
    if len(tokens) == width - 1 and "redop" in names:
        names.remove("redop")  # alltoall of some versions prints an empty redop
    elif len(tokens) != width:
        raise ValueError(f"{len(tokens)} columns, the header has {width}")
    lead, perf = tokens[:len(names)], tokens[len(names):]
    cols = dict(zip(names, lead, strict=True))
    if layout.guessed and len(names) == 4 and "redop" in names and _INT.match(cols["redop"]):
        cols["root"] = cols.pop("redop")  # headerless pre-2.13 broadcast: the 4th column is root
    for key in ("size", "count"):
        if not cols.get(key, "").isdigit():
            raise ValueError(f"{key} {cols.get(key)!r} is not a count")
    for key in ("type", "redop"):
        if key in cols and not _IDENT.match(cols[key]):
            raise ValueError(f"{key} {cols[key]!r}")
    if "root" in cols and not _INT.match(cols["root"]):
        raise ValueError(f"root {cols['root']!r}")
    rows: list[Row] = []
    at = 0
    for placement, group_names in layout.groups:
        group = dict(zip(group_names, perf[at:at + len(group_names)], strict=True))
        at += len(group_names)
        values = [finite(group[c]) for c in (group_names[0], "algbw", "busbw")]
        if min(values) < 0:
            raise ValueError("negative time or bandwidth")
        for c in _GROUP_EXTRAS - set(_CHECKS):
            if c in group and group[c] != "N/A":
                finite(group[c])
        check = next((c for c in _CHECKS if c in group), None)
        wrong: int | None = None
        if check is not None:
            text = group[check].rstrip("*")  # rccl-tests marks counts over its threshold with '*'
            if text != "N/A":
                value = finite(text)
                if value < 0 or (check == "#wrong" and not value.is_integer()):
                    raise ValueError(f"{check} {text!r} is not a count")
                wrong = int(value) if check == "#wrong" else None
        rows.append(Row(size_bytes=int(cols["size"]), count=int(cols["count"]), type=cols["type"],
                        redop=cols.get("redop"), root=int(cols["root"]) if "root" in cols else None,
                        placement=placement, time_us=values[0], algbw_gbps=values[1], busbw_gbps=values[2],
                        wrong=wrong))
    return rows, stamp


def parse_text(text: str, source: str, tz: tzinfo) -> list[RunBuilder]:
    """Every run in ``text``, in order (including ones with nothing recognisable; the caller drops them)."""
    runs = [RunBuilder(source)]
    layout: Layout | None = None
    placement_line = ""
    in_table = False
    guessed: set[int] = set()  # runs whose rows were placed without a header (said once per run)
    lines = text.split("\n")
    complete = text.endswith("\n")
    for no, raw in enumerate(lines, 1):
        line = _LABEL.sub("", raw.rstrip("\r"))
        stripped = line.strip()
        cur = runs[-1]
        if not stripped:
            continue
        if _starts_run(cur, stripped):
            runs.append(RunBuilder(source))
            cur = runs[-1]
            layout, placement_line, in_table = None, "", False
        if m := _HEADER.match(stripped):
            cur.threads, cur.gpus = int(m.group(1)), int(m.group(2))
            if v := _VALIDATION.search(stripped):
                cur.validation = int(v.group(1))
            continue
        if stripped.startswith("#"):
            _comment(cur, stripped, no)
            body = stripped.lstrip("#").split()
            if body[:2] == ["size", "count"]:
                layout = header_layout(body, placement_line)
                in_table = True
                if layout is None:
                    cur.problems.append(f"line {no}: table header not understood; rows read by column count")
                elif layout.unknown():
                    cur.problems.append(f"line {no}: columns not read (not known to fabricscope): "
                                        + ", ".join(layout.unknown()))
            elif "out-of-place" in stripped or "in-place" in stripped:
                placement_line = stripped
            elif _OOB.match(stripped) or _AVG.match(stripped) or _COLLECTIVE.search(stripped):
                in_table = False
            continue
        _other(cur, stripped)
        if _FAILURE.search(stripped):
            cur.problems.append(f"line {no}: {stripped[:200]}")
            cur.finished, in_table = True, False
            continue
        tokens = stripped.split()
        looks_like_row = tokens[0].isdigit() and len(tokens) >= 7
        if not (looks_like_row or in_table) or _NOISE.search(stripped):
            continue
        if no == len(lines) and not complete:
            cur.problems.append(f"line {no}: last line has no line end (output cut?); not read")
            continue
        try:
            rows, stamp = parse_row(tokens, layout, tz)
        except ValueError as e:
            cur.problems.append(f"line {no}: not a result row ({e}): {stripped[:120]}")
            continue
        in_table = True
        if layout is None and id(cur) not in guessed:
            guessed.add(id(cur))
            cur.problems.append(f"line {no}: no table header: columns placed by their count ({len(tokens)}); "
                                "a guess, confirm with the header line")
        cur.rows.extend(rows)
        if cur.started_at is None:
            cur.started_at = stamp
    return runs


def _starts_run(cur: RunBuilder, line: str) -> bool:
    """A header, version or command line after a table (or a second header) begins the next run."""
    if _HEADER.match(line):
        return cur.threads is not None or bool(cur.rows) or cur.finished
    if not (cur.rows or cur.finished):
        return False
    if m := _COLLECTIVE.search(line):
        return m.group(1) == "starting"
    if line.startswith("#"):
        return bool(_TESTS_VERSION.match(line))
    return op_from_binary(line) is not None and not _NOISE.search(line)


def _comment(cur: RunBuilder, line: str, no: int) -> None:
    if m := _DEVICE.match(line):
        rank, group, pid, host, dev, bus, name = m.groups()
        cur.devices.append(Device(rank=int(rank), group=int(group) if group else None, pid=int(pid) if pid else None,
                                  host=host, device=int(dev), bus_id=bus, name=name or None))
        cur.hints += " " + name
    elif re.match(r"^#\s*Rank\s+\d", line):
        cur.problems.append(f"line {no}: device line not understood: {line[:120]}")
    elif m := _TESTS_VERSION.match(line):
        cur.versions["nccl_tests"] = m.group(1)[:MAX_VERSION]
        cur.versions.setdefault("nccl", nccl_code_version(int(m.group(3))))
    elif m := _COLLECTIVE.search(line):
        cur.op = op_from_binary(m.group(2)) or cur.op
        cur.finished = cur.finished or m.group(1) == "concluded"
    elif m := _OOB.match(line):
        cur.footer = True
        try:
            cur.oob = int(m.group(1))
        except ValueError:
            cur.problems.append(f"line {no}: out-of-bounds count not a number: {line[:120]}")
    elif m := _AVG.match(line):
        cur.footer = True
        try:
            cur.avg = finite(m.group(1))
        except ValueError:
            cur.problems.append(f"line {no}: average bus bandwidth not a number: {line[:120]}")


def _other(cur: RunBuilder, line: str) -> None:
    """Version and command lines outside the '#' comments (NCCL_DEBUG output, the echoed command)."""
    if m := _NCCL_VERSION.search(line):
        cur.versions["nccl"] = m.group(1)
        if m.group(2):
            cur.versions["cuda"] = m.group(2)
    if m := _RCCL_VERSION.search(line):
        cur.versions["rccl"] = m.group(1)
        cur.hints += " RCCL"
        if m.group(2):
            cur.versions["hip"] = m.group(2)
    if m := _RCCL_TESTS.match(line):
        cur.versions["rccl_tests"] = m.group(1)[:MAX_VERSION]
    if m := _KEYED.match(line):
        cur.versions[m.group(1).lower()] = m.group(2)[:MAX_VERSION]
    if m := _NRANKS.search(line):
        cur.nccl_ranks = max(cur.nccl_ranks or 0, int(m.group(1)))
    if cur.command is None and (op := op_from_binary(line)) is not None and not _NOISE.search(line):
        start = line.find(f"{op}_perf")
        cur.command = line[start:].rstrip(" \\")[:MAX_COMMAND]
        cur.op = cur.op or op
        procs = [int(n) for n in _PROCS.findall(line[:start])]
        per_proc = [int(n) for n in _PER_PROC.findall(line[start:])]
        if procs or per_proc:
            cur.launch_ranks = (procs[-1] if procs else 1) * math.prod(per_proc)
