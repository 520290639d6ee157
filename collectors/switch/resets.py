"""Counter discontinuity detection shared by the SNMP, NETCONF and gNMI collectors.

The server computes rates (``fabricscope.core.rates``) and catches a counter that goes *backwards*. It
cannot see a reset the counter has already climbed past by the next poll (an agent restart followed
by heavy traffic, a 32-bit counter that restarts near a plausible wrap distance). The device says so
itself: sysUpTime went back, ifCounterDiscontinuityTime or the ifIndex of a name changed, OpenConfig
``last-clear`` moved. Counter samples after such a point are sent as :class:`ResetSample` whose JSON
carries ``"discontinuity": true`` (API v1 sample field): the server passes it to ``series_rates`` so
the first rate after it is absent rather than bogus.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricscope.core.model import Sample, is_counter

_TICKS_WRAP = 2**32  # sysUpTime is TimeTicks (1/100 s), wraps after ~497 days
_TOLERANCE_TICKS = 60 * 100


@dataclass(frozen=True, slots=True)
class ResetSample(Sample):
    """A counter sample taken after a discontinuity: no rate against the value before it."""

    discontinuity: bool = True

    def to_json(self) -> dict[str, Any]:
        out = Sample.to_json(self)
        out["discontinuity"] = True
        return out


def as_reset(s: Sample) -> ResetSample:
    return ResetSample(s.ts, s.source, s.metric, s.value, s.labels)


class ResetTracker:
    """Remembers, per device and per source, what the last poll said about counter epochs."""

    def __init__(self) -> None:
        self._uptime: dict[str, tuple[int, float]] = {}
        self._epoch: dict[str, Hashable] = {}

    def agent_restarted(self, device: str, uptime_ticks: int | None, ts: float) -> bool:
        if uptime_ticks is None:
            return False
        prev = self._uptime.get(device)
        self._uptime[device] = (uptime_ticks, ts)
        if prev is None or uptime_ticks >= prev[0]:
            return False
        # went back: a TimeTicks wrap only if the previous value plus the elapsed time crossed 2**32
        # and the new value is where that wrap predicts; anything else is an agent restart
        projected = prev[0] + int((ts - prev[1]) * 100)
        wrapped = projected >= _TICKS_WRAP - _TOLERANCE_TICKS
        return not (wrapped and abs(projected % _TICKS_WRAP - uptime_ticks) <= _TOLERANCE_TICKS)

    def mark(
        self,
        samples: Iterable[Sample],
        restarted: bool = False,
        epochs: Mapping[str, Hashable] | None = None,
    ) -> list[Sample]:
        """Return the samples with counters of reset sources replaced by :class:`ResetSample`."""
        changed: set[str] = set()
        for source, epoch in (epochs or {}).items():
            prev = self._epoch.get(source)
            if prev is not None and prev != epoch:
                changed.add(source)
            self._epoch[source] = epoch
        if not restarted and not changed:
            return list(samples)
        return [as_reset(s) if is_counter(s.metric) and (restarted or s.source in changed) else s for s in samples]
