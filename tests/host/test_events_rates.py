"""Event derivation (pfc_storm, ecn_burst, link_flap) and wrap/reset safety of host-side rates."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from fabricscope.collectors.events import EventConfig, EventDetector, RateRule
from fabricscope.collectors.host.storage import IntervalMean
from fabricscope.core.model import Sample

PFC = {"priority": "3"}


def _pause(ts: float, value: float, source: str = "h:eth0") -> Sample:
    return Sample(ts, source, "rx_pause_frames_total", value, PFC)


def test_pfc_storm_needs_the_sustained_time_and_has_start_and_end() -> None:
    det = EventDetector(EventConfig(pfc_storm=RateRule("pfc_storm", ("rx_pause_frames_total",), 100.0, 3.0)))
    values = [0, 10, 20, 1020, 2020, 3020, 4020, 4030, 4040]  # 1000/s from t=2 to t=6
    events = [e for t, v in enumerate(values) for e in det.feed([_pause(float(t), float(v))])]
    assert len(events) == 1
    ev = events[0]
    assert (ev.kind, ev.source, ev.start, ev.end) == ("pfc_storm", "h:eth0", 2.0, 6.0)
    assert ev.attrs["priority"] == "3" and ev.attrs["peak_rate_per_s"] == 1000.0


def test_short_burst_below_min_duration_is_not_a_storm() -> None:
    det = EventDetector(EventConfig(pfc_storm=RateRule("pfc_storm", ("rx_pause_frames_total",), 100.0, 3.0)))
    values = [0, 1000, 2000, 2000, 2000]
    assert [e for t, v in enumerate(values) for e in det.feed([_pause(float(t), float(v))])] == []


def test_counter_clear_mid_storm_neither_ends_nor_fakes_a_storm() -> None:
    det = EventDetector(EventConfig(pfc_storm=RateRule("pfc_storm", ("rx_pause_frames_total",), 100.0, 2.0),
                                    emit_open=True))
    # 1000/s, then `ethtool` counter clear (value drops to 5): no rate for that interval.
    values = [0, 1000, 2000, 5, 1005, 2005, 2005]
    events = [e for t, v in enumerate(values) for e in det.feed([_pause(float(t), float(v))])]
    assert [(e.start, e.end) for e in events] == [(0.0, None), (0.0, 5.0)]
    assert all(e.attrs["peak_rate_per_s"] == 1000.0 for e in events)


def test_ecn_burst_and_close_at_shutdown() -> None:
    rule = RateRule("ecn_burst", ("ecn_marked_packets_total",), 50.0, 0.0)
    det = EventDetector(EventConfig(ecn_burst=rule))
    for t, v in enumerate([0, 500, 1000]):
        assert det.feed([Sample(float(t), "h:mlx5_0", "ecn_marked_packets_total", float(v))]) == []
    (ev,) = det.close(3.0)
    assert (ev.kind, ev.source, ev.start, ev.end) == ("ecn_burst", "h:mlx5_0", 0.0, 2.0)


def test_link_flap_from_oper_state_and_from_fast_flap_counter() -> None:
    det = EventDetector()

    def poll(t: float, up: float, downs: float) -> list:
        return det.feed([Sample(t, "h:eth0", "oper_up", up), Sample(t, "h:eth0", "link_down_total", downs)])

    assert poll(0, 1, 4) == [] and poll(1, 0, 5) == [] and poll(2, 0, 5) == []
    (ev,) = poll(3, 1, 5)
    assert (ev.kind, ev.start, ev.end, ev.attrs["down_s"]) == ("link_flap", 1.0, 3.0, 2.0)
    (fast,) = poll(4, 1, 6)  # down and up again between two polls
    assert (fast.start, fast.end, fast.attrs["downs"]) == (3.0, 4.0, 1.0)
    assert poll(5, 1, 0) == []  # counter reset (driver reload) is not a flap


WRAPS = st.sampled_from([2**32, 2**64])


@st.composite
def counter_series(draw: st.DrawFn) -> tuple[list[float], list[float], float]:
    """A real counter's readings: increments up to ``max_rate`` per second, wrapping at its width,
    with occasional resets to a small value (driver reload / counter clear)."""
    width = draw(WRAPS)
    # A counter is read often enough not to wrap twice between polls (10 s max here).
    max_rate = draw(st.floats(1.0, 1e9 if width == 2**64 else 2**31 / 10))
    n = draw(st.integers(2, 40))
    start = draw(st.integers(0, min(width - 1, 2**53)))
    ts: list[float] = []
    vals: list[float] = []
    t, v = 1e9, float(start)
    for _ in range(n):
        t += draw(st.floats(0.05, 10.0))
        if draw(st.integers(0, 9)) == 0:
            v = float(draw(st.integers(0, 1000)))
        else:
            v = float((int(v) + int(draw(st.floats(0, max_rate)) * (t - ts[-1] if ts else 1.0))) % width)
        ts.append(t)
        vals.append(v)
    return ts, vals, max_rate


@settings(max_examples=300, deadline=None)
@given(counter_series())
def test_wrap_and_reset_never_give_negative_or_huge_rates(series: tuple[list[float], list[float], float],
                                                          ) -> None:
    ts, vals, max_rate = series
    det = EventDetector(EventConfig(pfc_storm=RateRule("pfc_storm", ("rx_pause_frames_total",), 0.0, 0.0),
                                    emit_open=True))
    for t, v in zip(ts, vals, strict=True):
        for ev in det.feed([_pause(t, v)]):
            rate = ev.attrs["peak_rate_per_s"]
            assert math.isfinite(rate) and rate >= 0
            # Never above the true rate, except a reset that looks exactly like a 32-bit wrap,
            # which still stays under line rate (max_rate_per_s); float rounding aside.
            assert rate <= max(max_rate * 1.001 + 1.0, 2e9)


@settings(max_examples=200, deadline=None)
@given(counter_series(), counter_series())
def test_interval_latency_never_negative(ops: tuple, busy: tuple) -> None:
    mean = IntervalMean()
    for o, b in zip(ops[1], busy[1], strict=False):
        for value in mean.update([("h:vda", "read_latency_seconds", o, b / 1e3)]).values():
            assert math.isfinite(value) and value >= 0
