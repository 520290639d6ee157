"""What a generator could accidentally make easy, drawn per run (#15): how often each collector
samples (1–10 s), how far host clocks drift, which series never arrive or pause, how large counters
already are when the job starts, and how noisy steps and telemetry are.

Streams are built on a 1 s grid (generator.py) and then read the way each collector would read them:
a counter every k seconds is its cumulative value at those reads (exact, it is cumulative); a gauge
is the instant value, except latencies (the mean per operation over the interval, as diskstats gives
it) and watermarks (the maximum since the last read).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fabricscope.service.simulate.counters import Streams
from fabricscope.service.simulate.topology import Cluster

COLLECTORS = ("switch", "nic", "host", "storage", "gpu")
INTERVALS_S = (1, 10)  # sampling interval per collector, seconds (integers on the 1 s grid)
SKEW_S = (0.0, 0.25)  # the bound of per-host clock skew, drawn per run
STEP_JITTER = (0.01, 0.02)  # step-time spread (coefficient of variation) of a healthy job
TELEMETRY_NOISE = (0.0, 0.05)  # extra relative noise on traffic counters and continuous gauges
MISSING_SERIES = (0.0, 0.01)  # share of series never reported (a collector without that counter)
GAP_SERIES = (0.0, 0.05)  # share of series with one short gap (a collector restarting)
GAP_SAMPLES = (2, 8)
UPTIME_S = (3600.0, 3 * 365 * 86400.0)  # how long counters have been counting before the job
MAX_COUNTER = 2.0**60
# Gauges that are a measured quantity (noisy); the others are flags, widths, generations, maxima.
NOISY_GAUGES = frozenset({"read_latency_seconds", "write_latency_seconds", "gpu_power_watts",
                          "gpu_temperature_celsius", "gpu_sm_clock_hz", "queue_occupancy_bytes"})
# A latency gauge's operations counter: the mean over an interval is weighted by operations.
LATENCY_OPS = {"read_latency_seconds": "read_ops_total", "write_latency_seconds": "write_ops_total"}


@dataclass(frozen=True)
class Variation:
    intervals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COLLECTORS, 1))
    skew_s: float = 0.05
    step_jitter: float = 0.0  # 0: the model's own noise only
    telemetry_noise: float = 0.0
    missing_series: float = 0.0
    gap_series: float = 0.0
    large_counters: bool = False

    @classmethod
    def draw(cls, rng: np.random.Generator, *, min_interval: int = INTERVALS_S[0],
             max_interval: int = INTERVALS_S[1]) -> Variation:
        """All of it at random; `min_interval`/`max_interval` bound the sampling intervals."""
        return cls({c: int(rng.integers(min_interval, max_interval + 1)) for c in COLLECTORS},
                   float(rng.uniform(*SKEW_S)), float(rng.uniform(*STEP_JITTER)),
                   float(rng.uniform(*TELEMETRY_NOISE)), float(rng.uniform(*MISSING_SERIES)),
                   float(rng.uniform(*GAP_SERIES)), True)

    @property
    def max_interval(self) -> int:
        return max(self.intervals.values())

    def collector_of(self, cluster: Cluster, sources: list[str]) -> list[str]:
        """Which collector reads each source: from the cluster's lists, as a deployment knows them."""
        kinds = dict.fromkeys(cluster.switch_ports, "switch") | dict.fromkeys(cluster.nics, "nic")
        kinds |= dict.fromkeys(cluster.hosts, "host") | dict.fromkeys(cluster.volumes, "storage")
        if cluster.shared_source:
            kinds[cluster.shared_source] = "storage"
        kinds |= {cluster.rank_source(r): "gpu" for r in range(cluster.ranks)}
        return [kinds[s] for s in sources]

    def apply(self, st: Streams, cluster: Cluster, rng: np.random.Generator) -> Streams:
        """`st` (on a 1 s grid) as the collectors would report it under this variation."""
        values, keep = st.values.copy(), st.keep.copy()
        n, nt = values.shape
        counter = np.array([k == "counter" for k in st.kinds])
        if self.telemetry_noise > 0:
            _noise(values, counter, st.metrics, self.telemetry_noise, rng)
        if self.large_counters:
            _large_starts(values, counter, rng)
        coll = self.collector_of(cluster, st.sources)
        src_phase: dict[str, int] = {}
        index = {(s, m): i for i, (s, m) in enumerate(zip(st.sources, st.metrics, strict=True))}
        resampled = values.copy()
        for i in range(n):
            k = self.intervals[coll[i]]
            phase = src_phase.setdefault(st.sources[i], int(rng.integers(k)))  # one poll reads a source
            on = (np.arange(nt) - phase) % k == 0
            keep[i] &= on
            if k == 1 or counter[i]:
                continue
            ops = index.get((st.sources[i], LATENCY_OPS.get(st.metrics[i], "")))
            if ops is not None:
                resampled[i] = _weighted_mean(values[i], np.diff(values[ops], prepend=values[ops, 0]), k)
            elif st.metrics[i] == "queue_watermark_bytes":
                resampled[i] = np.maximum.reduce([np.concatenate([np.full(j, values[i, 0]), values[i, :nt - j]])
                                                  for j in range(k)])
        never = rng.random(n) < self.missing_series
        keep[never] = False
        for j in np.flatnonzero(rng.random(n) < self.gap_series):
            length = self.intervals[coll[j]] * int(rng.integers(GAP_SAMPLES[0], GAP_SAMPLES[1] + 1))
            start = int(rng.integers(0, max(nt - length, 1)))
            keep[j, start:start + length] = False
        return Streams(st.sources, st.metrics, st.labels, st.kinds, st.ts, resampled, keep)


def _weighted_mean(lat: np.ndarray, ops: np.ndarray, k: int) -> np.ndarray:
    """Per column, the operation-weighted mean of `lat` over the k columns ending there (the last
    value where no operation happened)."""
    num, den = np.cumsum(lat * ops), np.cumsum(ops)
    num_k = num - np.concatenate([np.zeros(k), num[:-k]])
    den_k = den - np.concatenate([np.zeros(k), den[:-k]])
    return np.where(den_k > 0, num_k / np.where(den_k > 0, den_k, 1.0), lat)


def _noise(values: np.ndarray, counter: np.ndarray, metrics: list[str], level: float,
           rng: np.random.Generator) -> None:
    """Extra noise of this run, in place: on traffic-sized counter increments (kept monotone) and on
    measured gauges."""
    for i in np.flatnonzero(counter):
        inc = np.diff(values[i])
        if inc.size and inc.mean() > 1e3:
            inc = np.clip(inc * rng.normal(1.0, level, inc.size), 0.0, None)
            values[i, 1:] = values[i, 0] + np.cumsum(inc)
    for i in np.flatnonzero(~counter):
        if metrics[i] in NOISY_GAUGES:
            values[i] *= rng.normal(1.0, level, (values.shape[1],)).clip(0.5)


def _large_starts(values: np.ndarray, counter: np.ndarray, rng: np.random.Generator) -> None:
    """Counters of equipment that has been up a while (in place): each starts near its own rate times
    a drawn uptime, up to 2^60; byte counters of a busy port get there. Still monotone."""
    rows = np.flatnonzero(counter)
    rate = np.array([max(float(values[i, -1] - values[i, 0]) / max(values.shape[1], 1), 0.0) for i in rows])
    uptime = np.exp(rng.uniform(np.log(UPTIME_S[0]), np.log(UPTIME_S[1]), rows.size))
    start = np.minimum(np.floor(rate * uptime), MAX_COUNTER) + rng.integers(0, 1000, rows.size)
    values[rows] = values[rows] - values[rows, :1] + start[:, None]
