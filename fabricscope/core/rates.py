"""Counter deltas and rates with 32/64-bit wrap and reset handling, vectorized with numpy.

Used by the server when it stores samples and by the host agent when it derives events, so both
agree on what a wrap and what a reset is.

Rules, for consecutive values ``prev`` then ``cur`` of one series over ``dt`` seconds:
- ``cur >= prev``: delta is ``cur - prev``.
- ``cur < prev`` and ``prev`` fits in 32 bits and the 32-bit wrap distance is under half the
  32-bit range: a 32-bit wrap, delta ``cur + 2**32 - prev``.
- ``cur < prev``, ``prev`` beyond 32 bits, and the 64-bit wrap distance implies a plausible rate
  (at most ``MAX_WRAP_RATE`` per second, faster than any link): a 64-bit wrap.
- otherwise a reset (driver reload, counter clear, device reboot): no rate (absent, never
  negative, never huge).
- An explicit discontinuity (sysUpTime went back, ``last-clear`` moved) is a reset too.
- ``dt <= 0`` (duplicate or out-of-order timestamp): no rate.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

WRAP32 = float(2**32)
WRAP64 = float(2**64)
_HALF32 = float(2**31)
MAX_WRAP_RATE = 1e12  # per second; 1.6 TB/s is beyond any single port we poll

FloatArray = npt.NDArray[np.float64]


def counter_deltas(
    prev: FloatArray,
    cur: FloatArray,
    discontinuity: npt.NDArray[np.bool_] | None = None,
    dt: FloatArray | None = None,
) -> FloatArray:
    """Deltas for aligned arrays of previous and current values; NaN where a reset happened.

    ``dt`` (seconds) bounds what a 64-bit wrap may imply; without it, one over 2**40 is a reset.
    """
    prev = np.asarray(prev, dtype=np.float64)
    cur = np.asarray(cur, dtype=np.float64)
    delta = cur - prev
    back = delta < 0
    if back.any():
        wrap32 = cur + WRAP32 - prev
        wrap64 = cur + WRAP64 - prev
        is32 = back & (prev < WRAP32) & (wrap32 < _HALF32)
        limit = MAX_WRAP_RATE * dt if dt is not None else float(2**40)
        is64 = back & ~is32 & (prev >= WRAP32) & (wrap64 <= limit)
        delta = np.where(is32, wrap32, np.where(is64, wrap64, delta))
        delta = np.where(back & ~is32 & ~is64, np.nan, delta)
    if discontinuity is not None:
        delta = np.where(discontinuity, np.nan, delta)
    # NaN inputs (missing previous) propagate as NaN: no rate.
    return delta


def counter_rates(
    prev_ts: FloatArray,
    prev: FloatArray,
    ts: FloatArray,
    cur: FloatArray,
    discontinuity: npt.NDArray[np.bool_] | None = None,
) -> FloatArray:
    """Per-second rates; NaN where there is no trustworthy rate (reset, no previous, dt <= 0)."""
    dt = np.asarray(ts, dtype=np.float64) - np.asarray(prev_ts, dtype=np.float64)
    delta = counter_deltas(prev, cur, discontinuity, np.where(dt > 0, dt, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(dt > 0, delta / np.where(dt > 0, dt, 1.0), np.nan)
    return rate


def series_rates(
    series: npt.NDArray[np.int64],
    ts: FloatArray,
    values: FloatArray,
    last_ts: FloatArray,
    last_values: FloatArray,
    discontinuity: npt.NDArray[np.bool_] | None = None,
) -> tuple[npt.NDArray[np.intp], FloatArray]:
    """Rates for a batch holding several series, each possibly with several samples.

    ``last_ts``/``last_values`` are per-row: the series' last stored point before this batch (NaN
    when unknown). Returns the order that sorts the batch by (series, ts) and the rates in that
    order. Only the first row of each series uses ``last_*``; later rows use their predecessor.
    """
    order = np.lexsort((ts, series))
    s = series[order]
    t = ts[order]
    v = values[order]
    prev_t = np.empty_like(t)
    prev_v = np.empty_like(v)
    first = np.ones(len(s), dtype=bool)
    if len(s) > 1:
        first[1:] = s[1:] != s[:-1]
        prev_t[1:] = t[:-1]
        prev_v[1:] = v[:-1]
    prev_t[first] = last_ts[order][first]
    prev_v[first] = last_values[order][first]
    disc = None if discontinuity is None else discontinuity[order]
    return order, counter_rates(prev_t, prev_v, t, v, disc)
