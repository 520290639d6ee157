"""The checkpoint steps' own baseline (baseline.compute_baselines) does not learn a write that is
faintly slow (FAINT_REL over it): a slow checkpoint volume that only checkpoint steps show is never
an excursion of the plain steps, so nothing else keeps it out, and learned, it hid itself. 787 run 31:
a +5 % checkpoint volume for 39 steps; its second to fourth checkpoint steps fell under FAINT_REL as
each one before taught the baseline more of it, and were missed."""

from __future__ import annotations

import numpy as np

from fabricscope.service.correlate.baseline import Baselines, compute_baselines
from fabricscope.service.correlate.constants import FAINT_REL

N, EVERY, FROM = 120, 10, 60


def _job(slow_write: float) -> tuple[np.ndarray, np.ndarray]:
    """A 2-s step (1 % noise) with a 0.9-s checkpoint write every EVERY steps; from step FROM on,
    each write takes `slow_write` more seconds."""
    rng = np.random.default_rng(31)
    dur = 2.0 * (1 + 0.01 * rng.standard_normal(N))
    is_ckpt = np.arange(N) % EVERY == EVERY - 1
    ckpt = np.where(is_ckpt, 0.9 * (1 + 0.005 * rng.standard_normal(N)), 0.0)
    ckpt[FROM:] += np.where(is_ckpt[FROM:], slow_write, 0.0)
    return dur + ckpt, ckpt


def _baselines(slow_write: float) -> tuple[np.ndarray, Baselines]:
    dur, ckpt = _job(slow_write)
    return dur, compute_baselines(dur, np.full(N, 0.3), ckpt > 0, ckpt)


def test_a_faintly_slow_write_stays_over_the_baseline_at_every_checkpoint_step() -> None:
    dur, bl = _baselines(0.1)  # +3.4 % of a 2.9-s checkpoint step: over FAINT_REL, under the bar
    steps = [i for i in range(FROM, N) if i % EVERY == EVERY - 1]
    over = [(dur[i] - bl.base[i]) / bl.base[i] for i in steps]
    assert len(steps) == 6 and min(over) >= FAINT_REL, over
    assert all(bl.ckpt_faint[i] or bl.borderline[i] or bl.slow[i] for i in steps)
    # the baseline is the healthy writes' level throughout
    assert max(bl.base[i] for i in steps) < min(dur[i] for i in steps)


def test_a_healthy_writes_spread_is_still_learned() -> None:
    dur, bl = _baselines(0.0)
    steps = [i for i in range(30, N) if i % EVERY == EVERY - 1]
    assert not any(bl.slow[i] or bl.ckpt_faint[i] for i in steps)
    assert all(abs(dur[i] - bl.base[i]) / bl.base[i] < FAINT_REL for i in steps)


def test_a_job_that_writes_a_checkpoint_at_every_step_is_judged_by_its_own_steps() -> None:
    # the lab's job with FSLAB_CKPT_EVERY=1: step 0 compiles and writes none, every later step does.
    # With no plain step to learn from, no step had a baseline and a 3-s link flap was never slow
    rng = np.random.default_rng(5)
    write = np.where(np.arange(N) > 0, 0.03 * (1 + 0.05 * rng.standard_normal(N)), 0.0)
    dur = 0.1 * (1 + 0.02 * rng.standard_normal(N)) + write
    dur[0] = 1.5
    dur[80] += 3.0
    b = compute_baselines(dur, np.full(N, 0.01), write > 0, write)
    assert np.isfinite(b.base[10:]).all()
    assert b.slow[80] and not b.slow[10:80].any() and not b.slow[81:].any()
    # one plain step in ten is history enough for the checkpoint steps' own baseline, as before
    nine = write * (np.arange(N) % 10 != 0)
    dur_nine = dur - write + nine
    ten = compute_baselines(dur_nine, np.full(N, 0.01), nine > 0, nine)
    assert np.isfinite(ten.base[60:]).all()
    assert ten.slow[80] and not ten.slow[60:80].any()
