"""What every switch collector returns from one poll, and the async protocol the scheduler drives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from fabricscope.core.model import Sample

from .lldp import Link


@dataclass
class PollResult:
    samples: list[Sample] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    # malformed parts of the reply that were skipped; the scheduler logs them with the device name
    problems: list[str] = field(default_factory=list)


class SwitchCollector(Protocol):
    """One device over one protocol. ``poll`` raises ``CollectionError`` when the device is unreachable."""

    name: str

    async def poll(self) -> PollResult: ...

    async def aclose(self) -> None: ...


def speeds_of(samples: list[Sample]) -> dict[str, float]:
    """ifName → speed_bps from a poll's samples (for the links' ``speed_bps``)."""
    return {s.source.partition(":")[2]: s.value for s in samples if s.metric == "speed_bps" and s.value}
