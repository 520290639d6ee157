"""Reshaping a generated scenario's telemetry after generation (the simulator itself is not changed):
per-collector sampling intervals, and fault anomalies that begin or end inside a step (#15 item 3).

Both need the scenario generated on a 1-second grid (`generate(..., interval=1.0)`): a coarser
collector keeps every k-th sample of that grid, and an onset is cut at a 1-second resolution."""

from __future__ import annotations

import numpy as np

from fabricscope.service.simulate.generator import Scenario

GRID_S = 1.0
LEAD_S = 30.0  # build_streams' default lead: the grid's first cell ends at -LEAD_S


def _cell_ends(sc: Scenario) -> np.ndarray:
    """True-clock end of each grid cell (the same for every series; their ts add offset and phase)."""
    n = sc.streams.ts.shape[1]
    return -LEAD_S + GRID_S * np.arange(n)


def resample(sc: Scenario, intervals: dict[str, int], rng: np.random.Generator) -> None:
    """Sample each source every `intervals[source]` seconds (others stay at 1 s), at a phase of its own.
    A counter keeps its running total (its rate then spans the whole interval); a gauge reports the
    mean over its interval, as a collector that reads a latency or an average occupancy does."""
    st = sc.streams
    assert np.allclose(np.diff(_cell_ends(sc)), GRID_S)
    phase = {s: int(rng.integers(0, k)) for s, k in sorted(intervals.items())}  # fixed order: same draws
    for i, src in enumerate(st.sources):
        k = intervals.get(src)
        if not k or k <= 1:
            continue
        cols = np.arange(st.ts.shape[1])
        on = (cols - phase[src]) % k == 0
        if st.kinds[i] == "gauge":
            csum = np.concatenate([[0.0], np.cumsum(st.values[i])])
            lo = np.maximum(cols - k + 1, 0)
            st.values[i] = (csum[cols + 1] - csum[lo]) / (cols + 1 - lo)
        st.keep[i] &= on


def confine_anomaly(sc: Scenario, a: float, b: float, fault_a: float, fault_b: float) -> list[str]:
    """Keep each fault-driven anomaly only inside [a, b] (true-clock seconds) of the fault's active
    span [fault_a, fault_b]: outside it, a series runs at its own usual level. A series is fault-driven
    when its mean excess over the fault span is far above its own noise. Returns those sources."""
    st = sc.streams
    ends = _cell_ends(sc)
    starts = ends - GRID_S
    in_fault = (ends > fault_a) & (starts < fault_b)
    quiet = (ends < fault_a - 3) | (starts > fault_b + 3)
    keep_share = np.clip((np.minimum(ends, b) - np.maximum(starts, a)) / GRID_S, 0.0, 1.0)
    touched: list[str] = []
    for i in range(len(st.sources)):
        gauge = st.kinds[i] == "gauge"  # a gauge's own value; a counter's increment per grid cell
        x = st.values[i].copy() if gauge else np.diff(st.values[i], prepend=st.values[i, 0])
        base = float(np.median(x[quiet]))
        noise = 1.4826 * float(np.median(np.abs(x[quiet] - base))) + 1e-9
        excess = x - base
        if float(excess[in_fault].mean()) < 8 * noise + 1e-6 * abs(base) + 1.0:
            continue
        cut = in_fault & (keep_share < 1)
        x[cut] = base + excess[cut] * keep_share[cut]
        if st.kinds[i] == "gauge":
            st.values[i] = x
        else:
            x[0] = 0.0
            st.values[i] = st.values[i, 0] + np.cumsum(x)
        touched.append(st.sources[i])
    return sorted(set(touched))
