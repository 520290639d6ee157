"""Per-run variation (#15): each collector's sampling interval, counters from large starts, clock skew,
missing series, latency gauges over an interval, step jitter."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.topology import ClusterSpec
from fabricscope.service.simulate.variation import COLLECTORS, MAX_COUNTER, Variation

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2, names=5)


def test_drawn_variation_stays_in_its_ranges() -> None:
    for seed in range(50):
        v = Variation.draw(np.random.default_rng(seed))
        assert set(v.intervals) == set(COLLECTORS)
        assert all(1 <= k <= 10 for k in v.intervals.values())
        assert 0 <= v.skew_s <= 0.25 and 0.01 <= v.step_jitter <= 0.02
    many = [Variation.draw(np.random.default_rng(s)).intervals["switch"] for s in range(50)]
    assert min(many) <= 2 and max(many) >= 9  # the whole range is drawn


def test_each_collector_reads_at_its_own_interval() -> None:
    v = Variation({"switch": 7, "nic": 3, "host": 5, "storage": 10, "gpu": 2}, skew_s=0.1)
    sc = generate(SPEC, steps=30, faults=2, seed=4, variation=v)
    st = sc.streams
    for i, coll in enumerate(v.collector_of(sc.cluster, st.sources)):
        cols = np.flatnonzero(st.keep[i])
        gaps = np.diff(cols)
        assert len(cols) > 3 and gaps.min() == v.intervals[coll] and (gaps % v.intervals[coll] == 0).all(), (
            st.sources[i], st.metrics[i])
        spacing = np.diff(st.ts[i, cols])
        assert abs(np.median(spacing) - v.intervals[coll]) < 0.01  # timestamps say so too


def test_counters_start_large_and_stay_monotone() -> None:
    sc = generate(SPEC, steps=30, faults=3, seed=6, variation=Variation(large_counters=True))
    st = sc.streams
    counter = np.array([k == "counter" for k in st.kinds])
    assert (np.diff(st.values[counter], axis=1) >= 0).all()
    first = st.values[counter, 0]
    assert first.max() > 2.0**50 and first.max() <= MAX_COUNTER + 1000
    plain = generate(SPEC, steps=30, faults=3, seed=6).streams.values[counter, 0]
    assert first.max() > 1000 * plain.max()
    # the increments are the same counts: a rate computed from them does not change
    rx = [i for i, m in enumerate(st.metrics) if m == "rx_bytes_total"][0]
    assert np.diff(st.values[rx]).sum() > 0


def test_host_clocks_are_skewed_on_samples_and_timings() -> None:
    sc = generate(SPEC, steps=20, faults=0, seed=7, variation=Variation(skew_s=0.25))
    assert np.abs(sc.host_skew).max() <= 0.25 and np.ptp(sc.host_skew) > 0.1
    st, c = sc.streams, sc.cluster
    for h, host in enumerate(c.hosts):  # a NIC's samples vs its leaf port's (switches keep NTP time)
        n = c.nics.index(next(x for x in c.nics if x.startswith(host + ":")))
        nic = st.sources.index(c.nics[n])
        port = st.sources.index(c.leaf_down[n])
        d = np.median(st.ts[nic] - st.ts[port])
        assert abs(d - sc.host_skew[h]) <= 0.21, (host, d, sc.host_skew[h])
    r = sc.cluster.rank_host.index(int(np.argmax(sc.host_skew)))
    step = next(s for s in sc.steps_payload() if s["rank"] == r and s["step"] == 3)
    assert abs(step["start"] - (sc.t0 + sc.timeline.start[3, r] + sc.host_skew.max())) < 1e-6


def test_some_series_never_arrive_and_some_pause() -> None:
    sc = generate(SPEC, steps=30, faults=0, seed=8, variation=Variation(missing_series=0.1, gap_series=0.2))
    keep = sc.streams.keep
    never = ~keep.any(axis=1)
    assert 0.04 < never.mean() < 0.2
    assert np.mean([(~k[2:-2]).sum() >= 2 for k in keep[~never]]) > 0.1


def test_a_latency_read_every_10_s_is_the_mean_per_operation() -> None:
    """A checkpoint write lasts under a second; read every 10 s, the write latency must still show it
    (diskstats gives the mean per operation over the interval), not only when a read falls in it."""
    slow = Variation(dict.fromkeys(COLLECTORS, 10))
    sc = generate(replace(SPEC, names=None), steps=60, faults=0, seed=9, variation=slow)
    st = sc.streams
    rows = [i for i, m in enumerate(st.metrics) if m == "write_latency_seconds"]
    seen = [st.values[i, st.keep[i]].max() for i in rows]
    assert min(seen) > 0.003  # the writes' ~4 ms, on every host


def test_step_jitter_is_the_asked_spread() -> None:
    for j in (0.01, 0.02):
        sc = generate(SPEC, steps=80, faults=0, seed=10, variation=Variation(step_jitter=j))
        d = sc.timeline.step_duration()[1:][~sc.timeline.ckpt_steps[1:]]
        assert 0.7 * j < d.std() / d.mean() < 1.4 * j
