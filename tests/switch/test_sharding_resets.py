from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricscope.collectors.switch.resets import ResetSample, ResetTracker
from fabricscope.collectors.switch.sharding import parse_shard, select, shard_of
from fabricscope.core.backoff import Backoff
from fabricscope.core.errors import ConfigError
from fabricscope.core.model import Sample
from fabricscope.core.rates import series_rates


class _D:
    def __init__(self, name: str) -> None:
        self.name = name


@given(st.sets(st.text(min_size=1, max_size=30), max_size=200), st.integers(min_value=1, max_value=16))
def test_shards_cover_inventory_exactly_once(names, n):
    devices = [_D(x) for x in names]
    picked = [d.name for i in range(1, n + 1) for d in select(devices, i, n)]
    assert sorted(picked) == sorted(names)  # no gap, no overlap


def test_shard_is_stable_across_processes_and_spreads():
    # sha256, not hash(): the same name lands in the same shard in every process
    assert shard_of("leaf1", 4) == shard_of("leaf1", 4) == 1 + int.from_bytes(
        __import__("hashlib").sha256(b"leaf1").digest()[:8], "big") % 4  # fmt: skip
    counts = np.bincount([shard_of(f"leaf{i}", 4) for i in range(4000)], minlength=5)[1:]
    assert counts.min() > 850


@pytest.mark.parametrize("bad", ["0/4", "5/4", "2", "a/b", "1/0"])
def test_bad_shard_spec(bad):
    with pytest.raises(ConfigError, match="shard"):
        parse_shard(bad)


def test_agent_restart_marks_counters_and_server_rate_is_absent():
    tr = ResetTracker()
    before = [Sample(100.0, "sw:e1", "rx_bytes_total", 4_000_000_000.0), Sample(100.0, "sw:e1", "oper_up", 1.0)]
    assert tr.mark(before, tr.agent_restarted("sw", 500_000, 100.0)) == before
    # agent rebooted: uptime back to 10 s; a 32-bit counter restarted and climbed to a value the
    # wrap rule would read as a plausible wrap (4e9 -> 1e8 looks like +394 MB)
    after = [Sample(110.0, "sw:e1", "rx_bytes_total", 100_000_000.0), Sample(110.0, "sw:e1", "oper_up", 1.0)]
    marked = tr.mark(after, tr.agent_restarted("sw", 1000, 110.0))
    assert isinstance(marked[0], ResetSample) and marked[0].to_json()["discontinuity"] is True
    assert not isinstance(marked[1], ResetSample)  # gauges are not counters
    disc = np.array([isinstance(s, ResetSample) for s in [before[0], marked[0]]])
    _, naive = series_rates(np.array([1, 1]), np.array([100.0, 110.0]), np.array([4e9, 1e8]),
                            np.full(2, np.nan), np.full(2, np.nan))  # fmt: skip
    _, rates = series_rates(np.array([1, 1]), np.array([100.0, 110.0]), np.array([4e9, 1e8]),
                            np.full(2, np.nan), np.full(2, np.nan), disc)  # fmt: skip
    assert naive[1] > 0  # without the flag the server would invent a rate
    assert np.isnan(rates[1])


def test_uptime_wrap_is_not_a_restart_and_epoch_change_is():
    tr = ResetTracker()
    assert not tr.agent_restarted("sw", 2**32 - 500, 0.0)
    assert not tr.agent_restarted("sw", 500, 10.0)  # TimeTicks wrapped after ~497 days
    s = [Sample(1.0, "sw:e1", "tx_bytes_total", 5.0)]
    assert tr.mark(s, epochs={"sw:e1": (3, 0)}) == s
    assert isinstance(tr.mark(s, epochs={"sw:e1": (3, 12345)})[0], ResetSample)  # discontinuity time moved


def test_backoff_grows_caps_and_resets():
    b = Backoff(10.0, cap=60.0)
    delays = [b.failed(at=0.0) for _ in range(6)]
    assert 8 <= delays[0] <= 12 and delays[-1] <= 72 and delays[2] > delays[0]
    assert not b.ready(at=1.0)
    b.succeeded()
    assert b.ready(at=0.0)


def test_uptime_drop_without_wrap_is_a_restart():
    tr = ResetTracker()
    assert not tr.agent_restarted("sw", 50_000, 0.0)
    assert tr.agent_restarted("sw", 300, 5.0)  # snmpd restarted 3 s ago
