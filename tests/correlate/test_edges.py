"""Where in a coarse sample's span its rate was (correlate/edges.py): a change its neighbours place
outside the window is taken out of the window's value; a burst, or a sample that covers the whole
window, keeps its even spread."""

from __future__ import annotations

import numpy as np
import pytest

from fabricscope.service.correlate.edges import edge_excess

# 10-s samples of a counter's rate (the mean over the 10 s up to each time)
T = np.array([0.0, 10.0, 20.0, 30.0, 40.0])


def test_a_fault_that_ended_early_in_the_span_of_the_windows_first_sample_is_taken_out() -> None:
    # 100/s until ~1.9 s into (10, 20], then 1/s: the (10, 20] sample reads 20/s. A window of
    # (18, 21] overlaps only that span's healthy end, and (20, 30] whole at 1/s.
    x = np.array([100.0, 100.0, 20.0, 1.0, 1.0])
    got = edge_excess(T, x, 18.0, 21.0)
    # spread evenly, window.py's value: the time-weighted mean (2 s at 20/s, 1 s at 1/s) moved
    # two thirds of the way to 20/s (the sample's share of the 3-s window); with the change, 1/s
    mean = (2 * 20.0 + 1.0) / 3
    assert got == pytest.approx(mean + 2 / 3 * (20.0 - mean) - 1.0)


def test_an_onset_late_in_the_span_of_the_sample_after_the_window_is_taken_out() -> None:
    # the mirror: healthy until ~15.4 s, then 100/s; the window (8, 10.5] overlaps (10, 20]'s start
    x = np.array([1.0, 1.0, 46.0, 100.0, 100.0])
    assert edge_excess(T, x, 8.0, 10.5) > 5.0


@pytest.mark.parametrize("x", [
    [1.0, 1.0, 20.0, 1.0, 1.0],  # a burst inside one span: both neighbours lower, it may be anywhere
    [100.0, 100.0, 20.0, 1.0, 1.0],  # the window holds the change itself (~1.9 s into the span)
])
def test_no_change_outside_the_window_is_taken_out(x: list[float]) -> None:
    ws, we = (18.0, 21.0) if x[0] == 1.0 else (10.5, 12.5)
    assert edge_excess(T, np.array(x), ws, we) == 0.0


def test_a_window_inside_one_span_after_its_change_is_taken_out() -> None:
    # a 10-s sample covers the whole 2-s window, 4 s after the fault ended in its span
    assert edge_excess(T, np.array([100.0, 100.0, 20.0, 1.0, 1.0]), 14.0, 16.0) == pytest.approx(20.0 - 1.0)


def test_a_rising_edge_on_the_windows_own_side_keeps_its_reading() -> None:
    # the fault began inside (10, 20] and runs on: its part is at the span's end, in the window
    x = np.array([1.0, 1.0, 20.0, 100.0, 100.0])
    assert edge_excess(T, x, 18.0, 21.0) == 0.0


def test_nothing_is_known_without_a_sample_before_the_window_or_with_no_rate() -> None:
    assert edge_excess(T[2:], np.array([20.0, 1.0, 1.0]), 18.0, 21.0) == 0.0
    assert edge_excess(T, np.array([np.nan, 100.0, np.nan, 1.0, 1.0]), 18.0, 21.0) == 0.0
