"""Faults that begin and end inside a step (#15): timings and telemetry cover only that share."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fabricscope.service.simulate.faults import Fault, fault_window, make_fault, random_plan
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)


def _pair(kind: str, onset: float, until: float, seed: int = 3) -> tuple[Fault, Fault]:
    f = make_fault(build_cluster(SPEC), kind, start_step=12, steps=3, severity=0.3, rng=np.random.default_rng(1))
    return f, replace(f, onset=onset, until=until)


def test_a_step_partly_covered_is_slowed_by_the_covered_share() -> None:
    whole, part = _pair("gpu_straggler", onset=0.5, until=0.25)
    a, b = (generate(SPEC, steps=20, faults=[f], seed=2) for f in (whole, part))
    assert b.truth[12].delay_s / a.truth[12].delay_s == pytest.approx(0.5, abs=0.08)
    assert b.truth[13].delay_s == pytest.approx(a.truth[13].delay_s, rel=0.02)  # fully covered
    assert b.truth[14].delay_s / a.truth[14].delay_s == pytest.approx(0.25, abs=0.08)


def test_telemetry_shows_only_the_covered_part() -> None:
    whole, part = _pair("nic_degradation", onset=0.6, until=0.4)
    a, b = (generate(SPEC, steps=20, faults=[f], seed=2, interval=1.0) for f in (whole, part))
    wa, wb = (fault_window(f, sc.timeline.start.min(axis=1), sc.timeline.end.max(axis=1))
              for f, sc in ((whole, a), (part, b)))
    s0, s1 = b.timeline.start.min(axis=1), b.timeline.end.max(axis=1)
    assert wb[0] == pytest.approx(s0[12] + 0.6 * (s1[12] - s0[12])) and wb[0] > wa[0] and wb[1] < wa[1]

    def elevated(sc: object) -> tuple[float, float]:
        """First and last sample time of the NIC's out-of-buffer counter above its background."""
        st = sc.streams  # type: ignore[attr-defined]
        i = next(i for i, (s, m) in enumerate(zip(st.sources, st.metrics, strict=True))
                 if s == whole.component and m == "rx_out_of_buffer_total")
        hot = np.flatnonzero(np.diff(st.values[i]) > 1e3) + 1
        return float(st.ts[i, hot[0]]), float(st.ts[i, hot[-1]])

    (fa, la), (fb, lb) = elevated(a), elevated(b)
    assert fb > fa + 0.6 and lb < la - 0.6  # it began later and ended earlier: inside the steps
    assert wb[0] - 0.1 <= fb - b.host_skew[b.cluster.hosts.index(whole.component.split(":")[0])] <= wb[0] + 1.3


def test_onset_and_until_are_checked() -> None:
    f = make_fault(build_cluster(SPEC), "gpu_straggler", start_step=5, steps=1, severity=0.2,
                   rng=np.random.default_rng(0))
    for onset, until in ((1.0, 1.0), (0.0, 0.0), (0.6, 0.5)):
        with pytest.raises(ValueError):
            replace(f, onset=onset, until=until)
    assert replace(f, onset=0.2, until=0.7).cover(5) == pytest.approx(0.5)
    assert replace(f, onset=0.2, until=0.7).cover(6) == 0.0


def test_random_plans_draw_mid_step_faults_when_asked() -> None:
    c = build_cluster(SPEC)
    plain = random_plan(c, np.random.default_rng(4), n_steps=200, n_faults=30)
    mid = random_plan(c, np.random.default_rng(4), n_steps=200, n_faults=30, mid_step=0.5, severity=(0.05, 0.8))
    assert all(f.onset == 0 and f.until == 1 for f in plain)
    assert sum(f.onset > 0 for f in mid) >= 5
    assert min(f.severity for f in mid) < 0.08
