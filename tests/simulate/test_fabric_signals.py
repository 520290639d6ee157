"""The simulator's RoCE queue/PFC and InfiniBand signals (#16): which series exist per fabric, and the
signatures of queue_incast (the culprit's queue fills; victims receive more pause than it shows) and
ib_congestion (credit waits on one switch port, less on its feeders)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fabricscope.service.simulate.faults import FABRIC_ONLY, FAULT_KINDS, make_fault, random_plan
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster

ROCE = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2, lossless_priority=4,
                   lossy_queue=1, port_prefix="swp")
IB = replace(ROCE, fabric="ib", port_prefix="p")


def _series(sc: Scenario) -> dict[tuple[str, str, str], int]:
    st = sc.streams
    return {(s, m, ",".join(f"{k}={v}" for k, v in sorted((lab or {}).items()))): i
            for i, (s, m, lab) in enumerate(zip(st.sources, st.metrics, st.labels, strict=True))}


def _rate(sc: Scenario, i: int, steps: range) -> float:
    """Mean rate (counters) or value (gauges) of series i over the true-time window of `steps`."""
    st, tl = sc.streams, sc.timeline
    a, z = float(tl.start[steps.start].min()), float(tl.end[steps.stop - 1].max())
    t = st.ts[i]
    inside = (t > a + 2.0) & (t <= z)
    if st.kinds[i] == "gauge":
        return float(st.values[i][inside].mean())
    j = np.flatnonzero(inside)
    return float((st.values[i][j[-1]] - st.values[i][j[0] - 1]) / (t[j[-1]] - t[j[0] - 1]))


def _fault(spec: ClusterSpec, kind: str, variant: str, seed: int = 2, sev: float = 0.4) -> Scenario:
    c = build_cluster(spec)
    f = make_fault(c, kind, start_step=10, steps=4, severity=sev, variant=variant, rng=np.random.default_rng(seed))
    return generate(spec, job="j", steps=20, faults=[f], seed=seed)


def test_roce_ports_report_queues_and_the_lossless_priority() -> None:
    sc = generate(ROCE, job="j", steps=12, faults=0, seed=1)
    ser = _series(sc)
    port = sc.cluster.leaf_down[0]
    assert port == "leaf1:swp1"
    for q in ("4", "1"):
        for m in ("tx_queue_bytes_total", "tx_queue_packets_total", "queue_dropped_packets_total",
                  "ecn_marked_packets_total", "queue_occupancy_bytes", "queue_watermark_bytes"):
            assert (port, m, f"queue={q}") in ser, (m, q)
    assert (port, "pfc_deadlock_total", "queue=4") in ser and (port, "pfc_deadlock_total", "queue=1") not in ser
    assert (port, "tx_pause_frames_total", "priority=4") in ser and (port, "ecn_marked_packets_total", "") in ser
    assert ("node01:mlx5_0", "rx_pause_frames_total", "priority=4") in ser
    assert not any(m == "port_xmit_wait_total" for _, m, _ in ser)
    # the lossless queue carries the job's traffic, bytes and packets alike
    b, p = ser[(port, "tx_queue_bytes_total", "queue=4")], ser[(port, "tx_queue_packets_total", "queue=4")]
    rb, rp = _rate(sc, b, range(3, 10)), _rate(sc, p, range(3, 10))
    assert rb > 1e9 and 3000 < rb / rp < 5000


def test_infiniband_has_credits_not_pause() -> None:
    sc = generate(IB, job="j", steps=12, faults=0, seed=1)
    metrics = {m for _, m, _ in _series(sc)}
    assert {"port_xmit_wait_total", "link_error_recovery_total", "symbol_errors_total", "tx_discards_total",
            "link_down_total"} <= metrics
    assert not metrics & {"rx_pause_frames_total", "tx_pause_frames_total", "ecn_marked_packets_total",
                          "cnp_handled_total", "queue_occupancy_bytes", "rx_fcs_errors_total"}
    assert sc.cluster.spine_ports[0] == "spine1:p1"


def test_queue_incast_fills_one_queue_and_pauses_upstream() -> None:
    sc = _fault(ROCE, "queue_incast", "lossless")
    f = sc.faults[0]
    ser = _series(sc)
    on, off = range(10, 14), range(3, 9)
    occ = ser[(f.component, "queue_occupancy_bytes", "queue=4")]
    assert _rate(sc, occ, on) > 20 * _rate(sc, occ, off)
    lossy = ser[(f.component, "queue_occupancy_bytes", "queue=1")]
    assert _rate(sc, lossy, on) < 3 * _rate(sc, lossy, off)  # the other queue is untouched
    leaf = f.component.split(":")[0]
    ups = [u for u in sc.cluster.leaf_up if u.startswith(leaf + ":")]
    sent = [_rate(sc, ser[(u, "tx_pause_frames_total", "priority=4")], on) for u in ups]
    got = [_rate(sc, ser[(s, "rx_pause_frames_total", "priority=4")], on)
           for s, u in zip(sc.cluster.spine_ports, sc.cluster.leaf_up, strict=True) if u in ups]
    assert min(sent) > 1000 and sum(got) >= sum(sent) * 0.9  # victims receive at least what was sent
    own_pause = _rate(sc, ser[(f.component, "tx_pause_frames_total", "priority=4")], on)
    assert max(got) > 10 * own_pause  # the culprit's own pause counters stay quiet


def test_lossy_incast_drops_without_pause() -> None:
    sc = _fault(ROCE, "queue_incast", "lossy")
    f = sc.faults[0]
    ser = _series(sc)
    on, off = range(10, 14), range(3, 9)
    assert _rate(sc, ser[(f.component, "queue_dropped_packets_total", "queue=1")], on) > 500
    leaf = f.component.split(":")[0]
    for u in (u for u in sc.cluster.leaf_up if u.startswith(leaf + ":")):
        i = ser[(u, "tx_pause_frames_total", "priority=4")]
        assert _rate(sc, i, on) < 3 * _rate(sc, i, off) + 20


@pytest.mark.parametrize("variant", ["leaf_down", "leaf_up", "spine"])
def test_ib_congestion_waits_most_on_its_port(variant: str) -> None:
    sc = _fault(IB, "ib_congestion", variant)
    f = sc.faults[0]
    ser = _series(sc)
    waits = {s: _rate(sc, i, range(10, 14)) for (s, m, _), i in ser.items() if m == "port_xmit_wait_total"}
    assert max(waits, key=lambda s: waits[s]) == f.component
    assert waits[f.component] > 50 * _rate(sc, ser[(f.component, "port_xmit_wait_total", "")], range(3, 9))


def test_ib_link_errors_count_recoveries() -> None:
    sc = _fault(IB, "link_errors", "host_link")
    f = sc.faults[0]
    i = _series(sc)[(f.component, "link_error_recovery_total", "")]
    assert _rate(sc, i, range(10, 14)) > 0.05 and _rate(sc, i, range(3, 9)) == 0


def test_plans_draw_only_kinds_of_their_fabric() -> None:
    for spec in (ROCE, IB):
        c = build_cluster(spec)
        kinds = {f.kind for s in range(30) for f in random_plan(c, np.random.default_rng(s), n_steps=80, n_faults=6)}
        assert all(spec.fabric in FABRIC_ONLY.get(k, (spec.fabric,)) for k in kinds)
        assert ("ib_congestion" in kinds) == (spec.fabric == "ib")
        assert ("queue_incast" in kinds) == (spec.fabric == "roce")
    assert FAULT_KINDS["queue_incast"][0] == FAULT_KINDS["ib_congestion"][0] == "fabric"


def test_invalid_fabric_spec() -> None:
    with pytest.raises(ValueError, match="fabric"):
        ClusterSpec(fabric="fc")
    with pytest.raises(ValueError, match="lossless_priority"):
        ClusterSpec(lossless_priority=0, lossy_queue=0)


def test_a_plan_of_kinds_the_fabric_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="ib fabric"):
        random_plan(build_cluster(IB), np.random.default_rng(0), n_steps=80, n_faults=2, kinds=["queue_incast"])
    none = random_plan(build_cluster(IB), np.random.default_rng(0), n_steps=80, n_faults=0, kinds=["queue_incast"])
    assert none == []
