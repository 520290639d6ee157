"""The ranking's window decomposition (service/fleet/rollup.spans): any range of whole UTC days is
covered exactly, each span aligned to its size, and by few spans (what keeps the ranking's scan short)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from fabricscope.service.fleet.rollup import ORIGIN, SPAN_LEVELS, span_start, spans


@settings(max_examples=500, deadline=None)
@given(start=st.integers(min_value=0, max_value=80_000), length=st.integers(min_value=0, max_value=800))
def test_spans_cover_the_days_exactly_aligned_and_few(start: int, length: int) -> None:
    lo = ORIGIN + timedelta(days=start)
    hi = lo + timedelta(days=length)
    got = spans(lo, hi)
    days = []
    for level, s in got:
        assert 0 <= level <= SPAN_LEVELS
        assert span_start(s, level) == s  # aligned: the rollup keeps exactly this span
        days += [s + timedelta(days=i) for i in range(1 << level)]
    assert days == [lo + timedelta(days=i) for i in range(length)]
    # at most two of each smaller size (one each side) plus the whole largest spans
    assert len(got) <= 2 * SPAN_LEVELS + length // (1 << SPAN_LEVELS) + 1


def test_a_month_is_a_handful_of_spans() -> None:
    lo = datetime(2026, 10, 1, tzinfo=UTC)
    assert len(spans(lo, lo + timedelta(days=30))) <= 8
