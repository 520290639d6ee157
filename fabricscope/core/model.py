"""The shared vocabulary of collectors: immutable samples and events, and the Collector protocol.

A collector is split in two: ``fetch`` talks to the outside world (a device, ``/sys``), ``parse`` is a
pure function from raw output to samples. Tests hit ``parse`` with recorded real output.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Labels = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one metric of one source at one time (Unix epoch seconds).

    ``source`` is ``device`` or ``device:interface``; ``metric`` is a canonical name from docs/API.md
    (``rx_bytes_total``) or an extra one kept as-is. Counters end in ``_total``.
    """

    ts: float
    source: str
    metric: str
    value: float
    labels: Labels | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": self.ts, "source": self.source, "metric": self.metric, "value": self.value}
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


@dataclass(frozen=True, slots=True)
class Event:
    """Something with a start (and usually an end): a PFC storm, a link flap, a checkpoint."""

    kind: str
    source: str
    start: float
    end: float | None = None
    job: str | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "source": self.source, "start": self.start}
        if self.end is not None:
            out["end"] = self.end
        if self.job is not None:
            out["job"] = self.job
        if self.attrs:
            out["attrs"] = dict(self.attrs)
        return out


@dataclass(frozen=True, slots=True)
class Link:
    """A discovered link between two ports (``device:port``), from LLDP or an InfiniBand sweep."""

    a: str
    b: str
    speed_bps: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"a": self.a, "b": self.b}
        if self.speed_bps:
            out["speed_bps"] = self.speed_bps
        return out


@runtime_checkable
class Collector(Protocol):
    """A polled collector. ``name`` identifies it in logs and self-metrics."""

    name: str

    def poll(self) -> list[Sample]: ...


def now() -> float:
    """Wall-clock time for sample timestamps (monotonic clocks are for durations only)."""
    return time.time()


def is_counter(metric: str) -> bool:
    return metric.endswith("_total")
