"""The steps around a step inside a fault that spans steps (engine._attribute): which may be slow on
either side of it, and whether it sits at their level. Pure functions of the step summaries and their
baselines; the engine asks their telemetry (engine._between, through corroborate.Probes)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fabricscope.service.correlate.baseline import Baselines
from fabricscope.service.correlate.constants import REL, SEG_MEMBER_SIGMAS


def _side(bl: Baselines, steps: np.ndarray, i: int, way: int, reach: int) -> list[int]:
    """The steps up to `reach` steps from row `i` in direction `way` that may be slow (slow, or
    borderline), nearest first, up to the first one the timing alone flags slow. Only consecutive
    steps count (a step missing from the job ends the side)."""
    side: list[int] = []
    for k in range(1, reach + 1):
        j = i + way * k
        if not 0 <= j < len(steps) or steps[j] != steps[i] + way * k:
            break
        if bl.slow[j] or bl.borderline[j]:
            side.append(int(steps[j]))
            if bl.slow[j]:
                break
    return side


def slow_around(bl: Baselines, summ: pd.DataFrame, i: int, reach: int) -> tuple[list[int], list[int]] | None:
    """The steps up to `reach` steps before and after row `i` of `summ` that may be slow (slow, or
    borderline: _between asks their telemetry), nearest first, each side up to its first step the
    timing alone flags slow (a step past it is past the fault's edge seen from `i`); None when a side
    has none."""
    steps = summ["step"].to_numpy(int)
    before, after = _side(bl, steps, i, -1, reach), _side(bl, steps, i, 1, reach)
    return (before, after) if before and after else None


def slow_beside(bl: Baselines, summ: pd.DataFrame, i: int, reach: int) -> tuple[list[int]] | None:
    """The steps up to `reach` steps after row `i` that may be slow (as slow_around) when none up to
    `reach` steps before it may be, or those before it when none after it may be: row `i` may be
    the first or the last step of a fault. None otherwise."""
    steps = summ["step"].to_numpy(int)
    before, after = _side(bl, steps, i, -1, reach), _side(bl, steps, i, 1, reach)
    return (after,) if after and not before else (before,) if before and not after else None


def slow_near(bl: Baselines, summ: pd.DataFrame, i: int, reach: int) -> tuple[list[int], ...] | None:
    """slow_around's two sides when both have steps that may be slow, else slow_beside's one side
    (None: neither has): row `i` inside a fault, or at its first or last step."""
    steps = summ["step"].to_numpy(int)
    sides = tuple(s for s in (_side(bl, steps, i, -1, reach), _side(bl, steps, i, 1, reach)) if s)
    return sides or None


def at_their_level(
    bl: Baselines, summ: pd.DataFrame, i: int, around: tuple[list[int], ...], over_centre: bool = False
) -> bool:
    """Whether row `i`'s step is not far under the level of the steps `around` it (each over its own
    baseline): over half that level less SEG_MEMBER_SIGMAS of the noise, as a step of a proven
    shift must be (sequential.Cusum.mark), and never asked for more than REL. A small
    fault's level is inside the noise, so any step passes; two +30 % faults of one link four steps
    apart leave steps at the baseline between them. `around` holds
    consecutive steps (slow_around), so each one's row is as far from `i` as its step is.
    `over_centre`: and never under the window's centre (a fault's first or last step, slow_beside: a
    step beside the fault at its usual time must not pass)."""
    dur = summ["dur"].to_numpy(float)
    step_i = int(summ["step"].iat[i])
    rows = [i + s - step_i for side in around for s in side]
    rel = [(dur[k] - bl.base[k]) / bl.base[k] for k in rows]
    level = float(np.nanmedian(rel)) if rel else 0.0
    cut = min(level / 2 - SEG_MEMBER_SIGMAS * float(bl.sigma[i]) / float(bl.base[i]), REL)
    if over_centre:
        cut = max(cut, 0.0)
    return bool((dur[i] - bl.centre[i]) / bl.base[i] >= cut)
