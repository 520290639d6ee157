"""Where in a coarse sample's span its rate was: the samples at a step's edges (faults that begin
or end inside a sampling interval).

A counter's rate sample is the mean over its span (window.py). A 10-s sample that overlaps a 2-s
step's first second holds whatever happened in the other nine, and window.py counts its rate for
that overlap as if it were spread evenly. That is all one sample says, but its neighbours say more:
when the sample before it ran at a fault's height and the sample after it at the healthy level, the
fault ended inside the span, and a single change between those two levels puts the fault's part of
the span at its start, at the share (rate - after) / (before - after) of it. A step that overlaps
only the span's end, or a middle part past that share, then saw the healthy level (else a queue
incast that ended seconds before the step lends its ECN marks to a step whose loss was a GPU's, and
the first tenth of a second of a NIC fault's onset sample makes a healthy step slow). The same
holds, mirrored, for an onset (the sample after higher).

Only a lower estimate is taken (a rate between its neighbours' that a single change explains); a
burst inside one span (both neighbours lower) keeps the even spread. Asked only of the few series
that stood out (queries.outliers) whose interval is longer than the window.
"""

from __future__ import annotations

import numpy as np


def _one_change(x: float, before: float, after: float, span: float, o1: float, o2: float) -> float:
    """The mean rate over seconds [o1, o2] of a span (from its start) whose mean rate is `x`, when the
    span went from the level `before` to the level `after` in a single change; `x` itself when no
    single change between those levels explains it."""
    if not (np.isfinite(before) and np.isfinite(after)) or not min(before, after) < x < max(before, after):
        return x
    change = (x - after) / (before - after) * span  # seconds at `before`, from the span's start
    at_before = min(max(min(o2, change) - o1, 0.0), o2 - o1)
    return (at_before * before + (o2 - o1 - at_before) * after) / (o2 - o1)


def _value(t: np.ndarray, x: np.ndarray, ws: float, we: float, wlen: float) -> float:
    """window.window_values' value of one series whose samples in the window (and the first after it)
    are `t`, `x` (the first one's span from the window's start, as there): the highest of each
    sample's deviation from the time-weighted mean, counted at its share of the window."""
    prev = np.concatenate([[-np.inf], t[:-1]])
    ov = np.minimum(t, we) - np.maximum(prev, ws)
    span = np.diff(np.concatenate([[np.nan], t]))
    span[0] = np.nanmin(span[1:]) if len(t) > 1 else wlen
    ok = np.isfinite(x) & (ov > 0)
    if not ok.any():
        return float("nan")
    cm = float(np.sum(ov[ok] * x[ok]) / np.sum(ov[ok]))
    c = np.minimum(1.0, ov[ok] / np.maximum(np.minimum(span[ok], wlen), 1e-9))
    return float(np.max(cm + c * (x[ok] - cm)))


def edge_excess(t: np.ndarray, x: np.ndarray, ws: float, we: float) -> float:
    """How much of one counter series' window value (window.window_values) its edge samples' rates
    owe to a change their neighbours place outside the window: `t`, `x` (rate; NaN: none) are the
    series' samples in time order from before the window to after it. 0 when nothing is known."""
    wlen = max(we - ws, 1e-3)
    inside = np.flatnonzero(t > ws)
    if not len(inside) or inside[0] == 0:
        return 0.0
    first = int(inside[0])
    after = np.flatnonzero(t > we)
    last = int(after[0]) if len(after) else int(inside[-1])
    idx = np.arange(first, last + 1)
    seen = x[idx].astype(float)
    fixed = seen.copy()
    for k in {first, last}:
        a, b = float(t[k - 1]), float(t[k])
        o1, o2 = max(ws, a) - a, min(we, b) - a
        if k + 1 >= len(t) or (o1 <= 0.0 and o2 >= b - a) or o2 <= o1:
            continue  # no neighbour after it, or its span inside the window: nothing to place
        fixed[k - first] = min(seen[k - first], _one_change(seen[k - first], x[k - 1], x[k + 1], b - a, o1, o2))
    if np.array_equal(fixed, seen, equal_nan=True):
        return 0.0
    v_seen, v_fixed = _value(t[idx], seen, ws, we, wlen), _value(t[idx], fixed, ws, we, wlen)
    return max(v_seen - v_fixed, 0.0) if np.isfinite(v_seen) and np.isfinite(v_fixed) else 0.0
