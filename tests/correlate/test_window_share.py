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


def _samples(rates: list[float], *times: float) -> win.Samples:
    """Each series' samples at `times` (the last: the probe after the window), all at its rate."""
    n, k = len(rates), len(times)
    return win.Samples(np.repeat(np.arange(n, dtype=np.int64), k), np.tile(np.array(times, float), n),
                       np.zeros(n * k), np.repeat(np.array(rates, float), k))


WS, WE = 124.59, 126.74  # a 2.15-s step inside the span (123.98, 131.98] of an 8-s sample


def test_a_counter_sampled_every_8_s_counts_its_floor_at_the_windows_share() -> None:
    """Samples at 123.98 (in the step before) and 131.98 (the probe): the span is seen."""
    s = _samples([6.0, 129.25], 123.98, 131.98)
    pos, _, share = win.window_values(s, _scoring(2), WS, WE, WE - WS)
    assert list(pos) == [0, 1] and np.allclose(share, (WE - WS) / 8.0)


def test_no_share_for_a_gauge_or_an_interval_no_longer_than_the_window_and_an_unseen_one_is_asked() -> None:
    assert win.window_values(_samples([6.0], 123.98, 131.98), _scoring(1, gauge=True), WS, WE, WE - WS)[2].tolist() \
        == [1.0]  # a gauge reads a state
    assert win.window_values(_samples([6.0], 125.0, 126.0), _scoring(1), WS, WE, WE - WS)[2].tolist() == [1.0]
    assert np.isnan(win.window_values(_samples([6.0], 131.98), _scoring(1), WS, WE, WE - WS)[2]).all()
    assert win.single_samples(_samples([6.0, 7.0], 131.98))[0].tolist() == [0, 1]
    assert np.allclose(win.share_of(WE - WS, np.array([131.98, 125.0, np.nan]), np.array([123.98, 124.5, 1.0])),
                       [(WE - WS) / 8.0, 1.0, 1.0])


def _hits(rates: list[float], share: np.ndarray | None, resolve: object = None) -> list[int]:
    sc = _scoring(len(rates))
    pos = np.arange(len(rates))
    cur = np.array(rates, float)
    shares = None if share is None else win.Shares(share, 0.05, resolve)  # type: ignore[arg-type]
    out, _ = win.peer_scores(sc, pos, cur, cur, 3.0, 64, shares)
    return sorted(out["series_id"].tolist())


def test_a_burst_diluted_in_an_8_s_sample_stands_out_at_the_windows_floor_and_background_does_not() -> None:
    rates = [5.25, 6.0, 6.75, 5.9, 7.0, 5.4, 6.1, 129.25]  # eight hosts, the last one retransmitting
    share = np.full(len(rates), (WE - WS) / 8.0)
    assert _hits(rates, None) == []  # (129 - 6) / 50 = 2.5 floors: the whole floor hides it
    assert _hits(rates, share) == [7]
    wobble = [*rates[:-1], 20.0]  # a background burst of a few segments a second
    assert _hits(wobble, share) == []


def test_an_unseen_interval_is_asked_only_for_a_series_that_could_stand_out() -> None:
    """Every host sampled slower than the window, none with a span seen: only the one that could pass
    at the least share is probed, and its share then decides."""
    rates = [5.25, 6.0, 6.75, 5.9, 7.0, 5.4, 6.1, 129.25]
    asked: list[list[int]] = []

    def resolve(ids: np.ndarray) -> np.ndarray:
        asked.append(ids.tolist())
        return np.full(len(ids), (WE - WS) / 8.0)

    assert _hits(rates, np.full(len(rates), np.nan), resolve) == [7]
    assert asked == [[7]]
    assert _hits(rates, np.full(len(rates), np.nan), lambda ids: np.ones(len(ids))) == []
