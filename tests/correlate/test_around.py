"""The steps around a step inside a fault (correlate/around.py), on step-time series."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fabricscope.service.correlate.around import at_their_level, slow_around, slow_beside, slow_near
from fabricscope.service.correlate.baseline import Baselines, compute_baselines


def _judged(x: np.ndarray) -> tuple[Baselines, pd.DataFrame]:
    """Baselines of steps 100.. whose times are 2 s * (1 + x)."""
    n = len(x)
    d = 2.0 * (1.0 + x)
    bl = compute_baselines(d, np.full(n, 0.3), np.zeros(n, bool), np.zeros(n))
    return bl, pd.DataFrame({"step": np.arange(100, 100 + n), "dur": d})


def _noise(n: int) -> np.ndarray:
    return np.random.default_rng(35).normal(0.0, 0.01, n)


def test_the_nearest_steps_that_may_be_slow_each_side_up_to_the_first_slow_one() -> None:
    x = _noise(50)
    x[30:33] += 0.4  # slow by the per-step bar
    x[37:40] += 0.4
    bl, summ = _judged(x)
    assert bl.slow[30:33].all() and bl.slow[37:40].all() and not bl.slow[33:37].any()
    assert slow_around(bl, summ, 34, 4) == ([132], [137])  # steps, nearest first
    assert slow_around(bl, summ, 34, 2) is None  # 137 is 3 steps away
    assert slow_around(bl, summ, 33, 1) is None and slow_around(bl, summ, 31, 1) == ([130], [132])
    # one side or both: what slow_beside or slow_around gives, and None with neither
    assert slow_near(bl, summ, 33, 1) == slow_beside(bl, summ, 33, 1) == ([132],)
    assert slow_near(bl, summ, 31, 1) == ([130], [132]) and slow_near(bl, summ, 35, 1) is None
    # a step missing from the job ends its side
    gap = summ.drop(index=36).reset_index(drop=True)
    assert slow_around(bl, gap, 34, 4) is None


def test_a_step_at_the_baseline_is_at_a_small_faults_level_not_a_large_ones() -> None:
    """Rule: a step is at its neighbours' level when over half of it less SEG_MEMBER_SIGMAS of the noise
    (around.at_their_level)."""
    x = _noise(50)
    x[30:33] += 0.4
    x[33:37] = 0.0  # at the baseline
    x[37:40] += 0.4
    bl, summ = _judged(x)
    assert not at_their_level(bl, summ, 34, ([132], [137]))  # +40 % either side, this step at 0
    y = _noise(50)
    y[30:33] += 0.06
    y[33:37] = 0.0
    y[37:40] += 0.06
    small, summ2 = _judged(y)
    assert at_their_level(small, summ2, 34, ([132], [137]))  # +6 %: inside the noise of it
