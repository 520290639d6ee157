"""A job's first judged steps (baseline.compute_baselines) set the slow bar on sigma's upper one-
standard-error bound (baseline.history_margin): a sigma read from 5-8 steps is often a third under
the job's noise, and a +4.6 % step at step 8 was slow by 6.5 such sigmas (797 run 10)."""

from __future__ import annotations

import numpy as np
import pytest

from fabricscope.service.correlate.baseline import Baselines, compute_baselines, history_margin
from fabricscope.service.correlate.constants import K_SIGMA, WINDOW

# 797 run 10's first nine step times: its warm-up, then steps 1-7 at 1.1 % spread read as 0.7 %
FIRST = [5.5444, 2.0538, 1.9862, 2.0612, 2.0045, 2.0564, 2.0663, 2.0955]


def _bl(step8: float) -> Baselines:
    rng = np.random.default_rng(10)
    dur = np.concatenate([FIRST, [step8], 2.055 * (1 + 0.011 * rng.standard_normal(60))])
    n = len(dur)
    return compute_baselines(dur, np.full(n, 0.3), np.zeros(n, bool), np.zeros(n))


def test_the_margin_is_one_from_a_full_window_and_grows_as_history_shrinks() -> None:
    assert history_margin(WINDOW) == 1.0 and history_margin(4 * WINDOW) == 1.0
    got = [history_margin(n) for n in (5, 6, 8, 16, 32)]
    assert got == sorted(got, reverse=True) and got[-1] > 1.0
    assert history_margin(6) == pytest.approx((1 + 1.16 / 6 ** 0.5) / (1 + 1.16 / WINDOW ** 0.5))


def test_a_few_percent_step_on_little_history_is_not_slow_a_large_one_is() -> None:
    bl = _bl(2.1517)  # +4.6 %: over REL, 6.5 sigmas of the first steps' 0.7 %
    assert not bl.slow[8] and bl.threshold[8] > 2.1517
    assert bl.borderline[8]  # its telemetry may still show a cause (engine: a corroborated step)
    bl = _bl(2.25)  # +9.5 %: slow on any reading of that noise
    assert bl.slow[8]


def test_a_full_windows_bar_is_unchanged() -> None:
    bl = _bl(2.06)
    i = 8 + WINDOW + 5
    assert bl.threshold[i] == pytest.approx(bl.base[i] + max(K_SIGMA * bl.sigma[i], 0.04 * bl.base[i]))
