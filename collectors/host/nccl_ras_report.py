"""The model of an NCCL RAS status report (NCCL >= 2.24): what the ``ncclras`` client, or any TCP
client of the RAS port (``NCCL_RAS_ADDR``, localhost:28028), is told about a running NCCL job.

Two layouts, both read here into one :class:`RasReport`:

- **text** (every release): "Job summary", the "Communicators" table (one row per group of alike
  communicators: size, status, errors), then the "Errors" section (job processes missing from the
  data, processes considered dead, per communicator the ranks missing and the ranks reporting an
  error) and the "Warnings" section (timeouts, per communicator the ranks whose status or operation
  counts differ). Releases differ in details this parser knows: 2.24-2.25 list missing ranks as
  ``The missing rank: 21`` and say ``UNKNOWN`` and "collective operation counts"; 2.26+ give a
  ``Rank R -- GPU G managed by process P on node H`` line per rank, ``NOCOMM`` and per-operation counts.
- **json** (2.28.7+, ``SET FORMAT json``): every communicator with every rank's status and operation
  counts and the missing ranks flagged ``unresponsive`` / ``considered_dead``: :mod:`.nccl_ras_json`
  (the text layout: :mod:`.nccl_ras_text`).

Each rank the report shows in trouble becomes a :class:`RankState`: ``dead`` (its process is
considered dead), ``unresponsive`` (its process did not answer), ``missing`` (no data for it and the
report says no more), ``nocomm`` (its process answered without this communicator: initialising or
tearing down), ``init_error`` / ``async_error`` (with NCCL's error), ``abort``, ``behind`` /
``not_launched`` (fewer operations of a kind than the most advanced ranks), ``status`` (a status that
differs from the other ranks'). Communicator ranks are the communicator's own: rank r of a
communicator as large as the job is the job's rank r only for the world communicator. Every line
that is not read is named in ``problems``: nothing is dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT = "nccl-ras"
STATES = ("dead", "unresponsive", "missing", "nocomm", "init_error", "async_error", "abort", "behind",
          "not_launched", "status")


@dataclass(frozen=True)
class Process:
    pid: int
    host: str
    gpus: str | None = None  # as the report prints them: "5", "0,1", "5 (NVML 7)"


@dataclass
class RankState:
    comm: str  # the communicator's hash, 16 hex digits as NCCL's logs print it
    rank: int  # within the communicator
    state: str
    nranks: int | None = None  # the communicator's size, where the report gives it
    host: str | None = None
    pid: int | None = None
    gpu: str | None = None
    op: str | None = None  # behind / not_launched: the operation kind ("collective" before 2.26)
    count: int | None = None  # behind: operations of that kind this rank launched
    detail: str | None = None  # the error (init_error, async_error) or the status (status)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Comm:
    hash: str
    nranks: int | None = None
    ranks_seen: int | None = None
    ref: str | None = None  # text: "#<group>-<index>"
    status: str | None = None
    errors: list[str] = field(default_factory=list)
    op_counts: list[dict[str, Any]] = field(default_factory=list)  # text: {"op", "count", "ranks"} per line

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, [])}


@dataclass
class RasReport:
    format: str  # "text" or "json"
    nccl_version: str | None = None
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    collection_s: float | None = None
    timeouts: int | None = None
    groups: list[dict[str, Any]] = field(default_factory=list)  # text: the Communicators table's rows
    comms: list[Comm] = field(default_factory=list)  # communicators the report details
    ranks: list[RankState] = field(default_factory=list)
    dead_processes: list[Process] = field(default_factory=list)
    unresponsive_processes: list[Process] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def troubled(self) -> bool:
        return bool(self.ranks or self.dead_processes or self.unresponsive_processes)

    def to_attrs(self, *, max_ranks: int = 512) -> dict[str, Any]:
        """The event's attributes: what the report says, without the healthy ranks (bounded: an
        event's attributes are at most 64 KiB; ranks past ``max_ranks`` are counted, not listed)."""
        out: dict[str, Any] = {"format": self.format}
        for k in ("nccl_version", "nodes", "processes", "gpus", "collection_s", "timeouts"):
            if (v := getattr(self, k)) is not None:
                out[k] = v
        out["groups"] = self.groups
        out["comms"] = [c.to_json() for c in self.comms]
        out["ranks"] = [r.to_json() for r in self.ranks[:max_ranks]]
        if len(self.ranks) > max_ranks:
            out["ranks_not_listed"] = len(self.ranks) - max_ranks
        out["dead_processes"] = [{k: v for k, v in asdict(p).items() if v is not None} for p in self.dead_processes]
        out["unresponsive_processes"] = [{k: v for k, v in asdict(p).items() if v is not None}
                                         for p in self.unresponsive_processes]
        out["problems"] = len(self.problems)
        return out


def norm_hash(value: str) -> str:
    """``0xae94...`` (JSON) and ``ae94...`` (text, zero-padded) as one spelling: 16 lower-case hex digits."""
    v = value.strip().lower().removeprefix("0x")
    return v.rjust(16, "0") if re.fullmatch(r"[0-9a-f]{1,16}", v) else v
