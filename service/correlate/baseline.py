"""Robust per-job step-time baseline and slow-step detection (pure numpy over one job's steps).

One pass over the steps in order keeps a window of recent *healthy* steps (steps judged slow are
not let in, so a fault does not raise its own bar). Baseline = median, spread = 1.4826·MAD, and a
step is slow above `median + max(K·sigma, REL·median)`. Checkpoint steps are a class of their own
(they are legitimately longer). Change-point: when `CHANGE_RUN` consecutive steps are all slow and
agree with each other, the job has changed level (a new training phase) and that level becomes
the baseline; a fault that lasts that long has by then been reported as a regression.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from fabricscope.service.correlate.constants import (
    BOOTSTRAP_MAX_RATIO,
    CHANGE_RUN,
    CHANGE_SPREAD,
    CKPT_FIRST_MARGIN_S,
    CKPT_HISTORY,
    CKPT_MIN_HISTORY,
    CKPT_SPREAD_SHARE,
    K_SIGMA,
    MAD_TO_SIGMA,
    MIN_HISTORY,
    MIN_SIGMA_REL,
    REL,
    WINDOW,
)

__all__ = ["CHANGE_RUN", "Baselines", "compute_baselines"]


@dataclass
class Baselines:
    base: np.ndarray  # step-time baseline per step (NaN while there is too little history)
    base_transfer: np.ndarray  # baseline of the pure collective transfer time
    threshold: np.ndarray
    slow: np.ndarray  # bool


def _robust(x: np.ndarray) -> tuple[float, float]:
    med = float(np.median(x))
    return med, max(MAD_TO_SIGMA * float(np.median(np.abs(x - med))), MIN_SIGMA_REL * abs(med))


def compute_baselines(duration: np.ndarray, transfer: np.ndarray, is_ckpt: np.ndarray,
                      ckpt_med: np.ndarray) -> Baselines:
    """`duration`: job step time (median over ranks); `transfer`: sum over collectives of the
    shortest rank's duration (pure transfer, no waiting); `ckpt_med`: median checkpoint phase."""
    n = len(duration)
    base = np.full(n, np.nan)
    base_t = np.full(n, np.nan)
    thr = np.full(n, np.nan)
    slow = np.zeros(n, bool)
    transfer = np.where(np.isfinite(transfer), transfer, 0.0)
    hist: deque[tuple[float, float]] = deque(maxlen=WINDOW)
    hist_ck: deque[float] = deque(maxlen=CKPT_HISTORY)  # checkpoint extra over the normal baseline
    run: list[tuple[float, float]] = []
    for i in range(n):
        d = float(duration[i])
        if not np.isfinite(d):
            continue
        if len(hist) < MIN_HISTORY:
            # bootstrap: take steps that are not wildly off the few seen (step 0 compiles)
            if not is_ckpt[i] and (not hist or d < BOOTSTRAP_MAX_RATIO * float(np.median([h[0] for h in hist]))):
                hist.append((d, float(transfer[i])))
            continue
        hd = np.fromiter((h[0] for h in hist), float, len(hist))
        med, sigma = _robust(hd)
        med_t = float(np.median([h[1] for h in hist]))
        if is_ckpt[i]:
            if len(hist_ck) >= CKPT_MIN_HISTORY:
                extra = float(np.median(hist_ck))
            else:
                extra = float(ckpt_med[i]) + CKPT_FIRST_MARGIN_S
            b = med + extra
            t = b + max(K_SIGMA * sigma + CKPT_SPREAD_SHARE * extra, REL * b)
            is_slow = d > t
            if not is_slow:
                hist_ck.append(d - med)
        else:
            b = med
            t = b + max(K_SIGMA * sigma, REL * b)
            is_slow = d > t
            if not is_slow:
                hist.append((d, float(transfer[i])))
                run = []
            else:
                run.append((d, float(transfer[i])))
                if len(run) >= CHANGE_RUN:
                    rd = np.array([x[0] for x in run])
                    if (rd.max() - rd.min()) <= CHANGE_SPREAD * float(np.median(rd)):
                        hist.clear()
                        hist.extend(run)
                    run = run[1:]
        base[i], base_t[i], thr[i], slow[i] = b, med_t, t, is_slow
    return Baselines(base, base_t, thr, slow)
