"""Events derived on the host from counter rates: ``pfc_storm``, ``ecn_burst``, ``link_flap``.

:class:`EventDetector` is fed each poll's samples. It keeps the previous value of the counters it
watches and computes rates with :func:`fabricscope.core.rates.counter_rates`, so a wrap is a wrap and a
reset (driver reload, ``ethtool`` counter clear) yields no rate; an absent rate neither starts nor
ends an episode.

- ``pfc_storm`` / ``ecn_burst``: a (source, metric, labels) series whose rate stays above
  ``rate_per_s`` for at least ``min_duration_s``. The event starts at the beginning of the first
  interval over the threshold and ends at the end of the last one. Emitted once the episode ends
  (with ``end``); with ``emit_open`` also once when it becomes sustained (no ``end``).
  Rates above the rule's ``max_rate_per_s`` (faster than any link) are treated as resets.
- ``link_flap``: ``oper_up`` went 1 -> 0 -> 1 (start = first poll seen down, end = first poll seen
  up again), or ``link_down_total`` grew while ``oper_up`` stayed 1 (a flap shorter than the poll
  interval: start/end = the interval).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fabricscope.core.model import Event, Sample
from fabricscope.core.rates import counter_deltas, counter_rates


@dataclass(frozen=True)
class RateRule:
    kind: str
    metrics: tuple[str, ...]
    rate_per_s: float
    min_duration_s: float
    # A packet counter cannot beat line rate (800 Gb/s of 64-byte frames is 1.2e9/s). A faster
    # "rate" is a reset that looked like a 32-bit wrap (a counter past 2**31 cleared to ~0).
    max_rate_per_s: float = 2e9


@dataclass(frozen=True)
class EventConfig:
    pfc_storm: RateRule = RateRule(
        "pfc_storm", ("rx_pause_frames_total", "tx_pause_frames_total"), 1000.0, 3.0)
    ecn_burst: RateRule = RateRule(
        "ecn_burst", ("ecn_marked_packets_total", "cnp_sent_total"), 10000.0, 0.0)
    link_flap: bool = True
    emit_open: bool = False


Key = tuple[str, str, tuple[tuple[str, str], ...]]


@dataclass
class _Episode:
    start: float
    last_end: float
    peak: float
    opened: bool = False


@dataclass
class _LinkState:
    up: float | None = None
    down_since: float | None = None
    downs: float | None = None
    ts: float | None = None


@dataclass
class EventDetector:
    config: EventConfig = field(default_factory=EventConfig)
    _last: dict[Key, tuple[float, float]] = field(default_factory=dict)
    _episodes: dict[Key, _Episode] = field(default_factory=dict)
    _links: dict[str, _LinkState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # metric -> rule, looked up once per sample (thousands per poll on a big host)
        self._by_metric = {m: r for r in (self.config.ecn_burst, self.config.pfc_storm) for m in r.metrics}

    def _rule(self, metric: str) -> RateRule | None:
        return self._by_metric.get(metric)

    def feed(self, samples: Iterable[Sample]) -> list[Event]:
        """One poll's samples -> events that became sustained or ended with this poll."""
        watched: list[tuple[Key, RateRule, float, float]] = []
        links: dict[str, dict[str, tuple[float, float]]] = {}
        flap_metrics = ("oper_up", "link_down_total") if self.config.link_flap else ()
        for s in samples:
            rule = self._rule(s.metric)
            if rule is not None:
                key = (s.source, s.metric, tuple(sorted((s.labels or {}).items())))
                watched.append((key, rule, s.ts, s.value))
            elif s.metric in flap_metrics and not s.labels:
                links.setdefault(s.source, {})[s.metric] = (s.ts, s.value)
        events = self._rates(watched)
        for source, values in links.items():
            events.extend(self._link(source, values))
        return events

    def _rates(self, watched: Sequence[tuple[Key, RateRule, float, float]]) -> list[Event]:
        if not watched:
            return []
        prev = np.array([self._last.get(k, (np.nan, np.nan)) for k, _, _, _ in watched]).reshape(-1, 2)
        ts = np.array([t for _, _, t, _ in watched])
        vals = np.array([v for _, _, _, v in watched])
        rates = counter_rates(prev[:, 0], prev[:, 1], ts, vals)
        events: list[Event] = []
        for (key, rule, t, v), rate, p_ts in zip(watched, rates, prev[:, 0], strict=True):
            self._last[key] = (t, v)
            if np.isnan(rate) or rate > rule.max_rate_per_s:
                continue
            ep = self._episodes.get(key)
            if rate > rule.rate_per_s:
                if ep is None:
                    ep = self._episodes[key] = _Episode(start=float(p_ts), last_end=t, peak=float(rate))
                ep.last_end, ep.peak = t, max(ep.peak, float(rate))
                if self.config.emit_open and not ep.opened and t - ep.start >= rule.min_duration_s:
                    ep.opened = True
                    events.append(self._event(rule, key, ep, end=None))
            elif ep is not None:
                del self._episodes[key]
                if ep.last_end - ep.start >= rule.min_duration_s:
                    events.append(self._event(rule, key, ep, end=ep.last_end))
        return events

    @staticmethod
    def _event(rule: RateRule, key: Key, ep: _Episode, end: float | None) -> Event:
        source, metric, labels = key
        attrs: dict[str, Any] = {"metric": metric, "peak_rate_per_s": ep.peak,
                                 "threshold_per_s": rule.rate_per_s}
        attrs.update(dict(labels))
        return Event(rule.kind, source, ep.start, end, attrs=attrs)

    def _link(self, source: str, values: Mapping[str, tuple[float, float]]) -> list[Event]:
        st = self._links.setdefault(source, _LinkState())
        events: list[Event] = []
        ts = max(t for t, _ in values.values())
        if "oper_up" in values:
            up = values["oper_up"][1]
            if up == 0 and st.up == 1:
                st.down_since = ts
            elif up == 1 and st.up == 0 and st.down_since is not None:
                events.append(Event("link_flap", source, st.down_since, ts,
                                    attrs={"down_s": ts - st.down_since}))
                st.down_since = None
            elif up == 1 and st.up == 1 and "link_down_total" in values and st.downs is not None:
                delta = counter_deltas(np.array([st.downs]), np.array([values["link_down_total"][1]]))[0]
                if np.isfinite(delta) and delta > 0 and st.ts is not None:
                    events.append(Event("link_flap", source, st.ts, ts, attrs={"downs": float(delta)}))
            st.up = up
        if "link_down_total" in values:
            st.downs = values["link_down_total"][1]
        st.ts = ts
        return events

    def close(self, ts: float) -> list[Event]:
        """Agent shutdown: end every sustained episode still open at ``ts``."""
        events = []
        for key, ep in self._episodes.items():
            rule = self._rule(key[1])
            if rule is not None and ep.last_end - ep.start >= rule.min_duration_s:
                events.append(self._event(rule, key, ep, end=ep.last_end))
        self._episodes.clear()
        return events
