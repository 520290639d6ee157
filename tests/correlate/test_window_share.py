"""A counter sampled slower than the step (#15 item 3): its floor counts at the share of its interval
the window is (window.py). A 210/s retransmission burst filling a 2.15-s step reads 129/s in the
host's 8-s sample, under three floors of 50/s: at the window's share of the floor it stands out; a
host's background wobble in samples as long still does not."""

from __future__ import annotations

import numpy as np

from fabricscope.service.correlate import window as win


def _scoring(n: int, gauge: bool = False, floor: float = 50.0) -> win.Scoring:
    return win.Scoring(ids=np.arange(n, dtype=np.int64), grp=np.zeros(n, np.int64), gauge=np.full(n, gauge),
                       floor=np.full(n, floor), net=np.ones(n, bool), solo=np.zeros(n, bool), lit={})


def _one_sample_each(rates: list[float], t: float, prev_t: float | None) -> win.Samples:
    """Each series' one sample at `t` (the probe after the window), with its sample before the window
    at `prev_t` (None: not known)."""
    n = len(rates)
    s = win.Samples(np.arange(n, dtype=np.int64), np.full(n, t), np.zeros(n), np.array(rates, float))
    if prev_t is None:
        return s
    return win.with_previous(s, np.arange(n, dtype=np.int64), np.full(n, prev_t))


WS, WE = 124.59, 126.74  # a 2.15-s step inside the span (123.98, 131.98] of an 8-s sample


def test_a_counter_sampled_every_8_s_counts_its_floor_at_the_windows_share() -> None:
    s = _one_sample_each([6.0, 129.25], t=131.98, prev_t=123.98)
    pos, cur, share = win.window_values(s, _scoring(2), WS, WE, WE - WS)
    assert list(pos) == [0, 1] and cur.tolist() == [6.0, 129.25]
    assert np.allclose(share, (WE - WS) / 8.0)


def test_no_share_for_a_gauge_an_unknown_interval_or_one_shorter_than_the_window() -> None:
    for s, sc in ((_one_sample_each([6.0], 131.98, 123.98), _scoring(1, gauge=True)),  # a gauge reads a state
                  (_one_sample_each([6.0], 131.98, None), _scoring(1)),  # its span unseen
                  (_one_sample_each([6.0], 125.5, 124.5), _scoring(1))):  # a 1-s counter
        assert win.window_values(s, sc, WS, WE, WE - WS)[2].tolist() == [1.0]


def test_the_reading_less_previous_sample_changes_no_value() -> None:
    """The sample before the window only gives the span: the value and which series count are those
    without it."""
    rates = [5.25, 6.0, 7.0, 129.25]
    a = win.window_values(_one_sample_each(rates, 131.98, None), _scoring(4), WS, WE, WE - WS)
    b = win.window_values(_one_sample_each(rates, 131.98, 123.98), _scoring(4), WS, WE, WE - WS)
    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


def _hits(rates: list[float], share: np.ndarray | None) -> list[int]:
    sc = _scoring(len(rates))
    pos = np.arange(len(rates))
    cur = np.array(rates, float)
    out, _ = win.peer_scores(sc, pos, cur, cur, 3.0, 64, share)
    return sorted(out["series_id"].tolist())


def test_a_burst_diluted_in_an_8_s_sample_stands_out_at_the_windows_floor_and_background_does_not() -> None:
    rates = [5.25, 6.0, 6.75, 5.9, 7.0, 5.4, 6.1, 129.25]  # eight hosts, the last one retransmitting
    share = np.full(len(rates), (WE - WS) / 8.0)
    assert _hits(rates, None) == []  # (129 - 6) / 50 = 2.5 floors: the whole floor hides it
    assert _hits(rates, share) == [7]
    wobble = [*rates[:-1], 20.0]  # a background burst of a few segments a second
    assert _hits(wobble, share) == []
