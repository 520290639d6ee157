"""Realistic synthetic job step-time series for the detector's false-alarm and delay checks.

The job's step time is the max over ranks of each rank's step duration, so the noise model is
per rank and then maxed: per-rank log-normal jitter, a slowly wandering shared component
(AR(1): thermal/clock and data-dependent drift), rare single-step stalls (GC, data-loader
hiccups, 1.1-2.5x), rare short bursts of transient congestion (2-5 steps, +10-40%) and periodic
checkpoint steps (several times longer). Nothing here is a fault worth paging anyone for.
"""

from __future__ import annotations

import numpy as np


def step_times(n: int, *, seed: int, base_s: float = 1.0, ranks: int = 16, rank_cv: float = 0.01,
               drift_sd: float = 0.004, stall_p: float = 0.003, burst_p: float = 0.0005,
               ckpt_every: int = 500, ckpt_factor: float = 3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    per_rank = base_s * rng.lognormal(0.0, rank_cv, size=(n, ranks))
    x = per_rank.max(axis=1)
    # AR(1) with phi 0.98: stationary sd = drift_sd
    phi = 0.98
    eps = rng.normal(0.0, drift_sd * np.sqrt(1 - phi * phi), n)
    drift = np.empty(n)
    acc = 0.0
    for i in range(n):
        acc = phi * acc + eps[i]
        drift[i] = acc
    x *= 1.0 + drift
    stalls = rng.random(n) < stall_p
    x[stalls] *= rng.uniform(1.1, 2.5, stalls.sum())
    for start in np.flatnonzero(rng.random(n) < burst_p):
        length = int(rng.integers(2, 6))
        x[start:start + length] *= rng.uniform(1.1, 1.4)
    if ckpt_every:
        x[ckpt_every - 1::ckpt_every] *= ckpt_factor
    x[:2] *= 5.0  # compilation / warm-up of the first steps
    return x


def with_regression(x: np.ndarray, *, at: int, factor: float, until: int | None = None) -> np.ndarray:
    """A sustained slowdown by `factor` (1.05 = 5%) from step index `at` (to `until`, exclusive)."""
    y = x.copy()
    y[at:until] *= factor
    return y
