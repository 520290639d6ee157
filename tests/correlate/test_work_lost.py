"""baseline.work_lost: the time a step lost outside its collectives, which engine._explain weighs
the work causes by, never under what its ranks' own clocks measured they waited for a straggler."""

from __future__ import annotations

import math

import pytest

from fabricscope.service.correlate.baseline import work_lost


def test_the_step_time_split_when_nobody_waited_longer() -> None:
    # a step 0.2 s over, 0.05 s of it in its collectives: 0.15 s of work
    assert work_lost(2.2, 2.0, 0.35, 0.3) == pytest.approx(0.15)
    assert work_lost(2.2, 2.0, 0.35, 0.3, waited=0.1) == pytest.approx(0.15)


def test_the_ranks_wait_when_the_split_leaves_the_work_less() -> None:
    """Rule: a step's work loss is never under its ranks' wait for a straggler past the next-slowest rank
    (baseline.work_lost, EngineConfig.measured_work_loss)."""
    # 783 run 7 step 69's shape: the step lost 0.051 s, its collectives 0.061 s, so the split leaves
    # the work nothing, while the ranks waited 0.043 s for one GPU
    assert work_lost(2.1269, 2.0754, 0.361, 0.300) == 0.0
    assert work_lost(2.1269, 2.0754, 0.361, 0.300, waited=0.043) == pytest.approx(0.043)


def test_never_negative_and_the_whole_loss_without_a_transfer_baseline() -> None:
    assert work_lost(1.9, 2.0, 0.3, 0.3) == 0.0
    assert work_lost(2.3, 2.0, 0.5, math.nan) == pytest.approx(0.3)
    assert work_lost(1.9, 2.0, 0.5, math.nan) == 0.0
