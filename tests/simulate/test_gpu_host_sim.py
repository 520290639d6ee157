"""The simulator's GPU and host telemetry and fault kinds (#17)."""

from __future__ import annotations

import numpy as np
import pytest

from fabricscope.service.simulate.faults import FAULT_KINDS, make_fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
NEW = ("gpu_thermal_throttle", "pcie_downtrain", "gpu_xid", "cpu_starved_loader", "tcp_retransmits")


def _series(sc: Scenario, source: str, metric: str, **labels: str) -> tuple[np.ndarray, np.ndarray]:
    st = sc.streams
    ix = [i for i, (s, m, lab) in enumerate(zip(st.sources, st.metrics, st.labels, strict=True))
          if s == source and m == metric and all((lab or {}).get(k) == v for k, v in labels.items())]
    assert len(ix) == 1, (source, metric, labels)
    return st.ts[ix[0]], st.values[ix[0]]


def _in_fault(sc: Scenario, ts: np.ndarray) -> np.ndarray:
    f = sc.faults[0]
    a = float(sc.timeline.start[f.start_step].min())
    z = float(sc.timeline.end[f.start_step + f.steps - 1].max())
    return (ts > a + 2.5) & (ts < z)


def _outside(sc: Scenario, ts: np.ndarray) -> np.ndarray:
    f = sc.faults[0]
    a = float(sc.timeline.start[f.start_step].min())
    z = float(sc.timeline.end[f.start_step + f.steps - 1].max())
    return (ts > 0) & ((ts < a - 0.1) | (ts > z + 2.5))


def _one(kind: str, variant: str = "", seed: int = 1) -> Scenario:
    f = make_fault(build_cluster(SPEC), kind, start_step=14, steps=4, severity=0.3, variant=variant,
                   rng=np.random.default_rng(seed))
    return generate(SPEC, steps=24, faults=[f], seed=seed)


def test_every_gpu_and_host_has_its_series_and_counters_start_large() -> None:
    sc = generate(SPEC, steps=12, seed=3)
    st = sc.streams
    cl = sc.cluster
    gpus = {cl.rank_source(r) for r in range(cl.ranks)}
    for g in gpus:
        have = {m for s, m in zip(st.sources, st.metrics, strict=True) if s == g}
        assert {"gpu_sm_clock_hz", "gpu_sm_clock_max_hz", "gpu_throttle_active", "gpu_power_watts",
                "gpu_temperature_celsius", "gpu_utilization_ratio", "gpu_ecc_errors_total",
                "gpu_nvlink_errors_total", "pcie_replays_total", "pcie_link_width", "pcie_link_width_max",
                "pcie_link_generation", "pcie_link_generation_max"} <= have
    for h in cl.hosts:
        have = {m for s, m in zip(st.sources, st.metrics, strict=True) if s == h}
        assert {"tcp_retransmitted_segments_total", "tcp_out_segments_total", "tcp_timeouts_total",
                "softnet_dropped_total", "cpu_pressure_seconds_total", "io_pressure_seconds_total",
                "memory_pressure_seconds_total", "cpu_thermal_throttle_total"} <= have
        _, v = _series(sc, h, "tcp_out_segments_total")
        assert v[0] > 1e4 and np.all(np.diff(v) >= 0)  # a long-running host's counter, never going back


def test_the_gpu_model_is_drawn_per_scenario() -> None:
    maxima = set()
    for seed in range(8):
        sc = generate(SPEC, steps=8, seed=seed)
        maxima.add(float(_series(sc, "node01:gpu0", "gpu_sm_clock_max_hz")[1][0]))
    assert len(maxima) > 1


@pytest.mark.parametrize("variant", ["sw_thermal", "hw_slowdown"])
def test_thermal_throttle_sets_its_reason_lowers_the_clock_and_slows_the_gpu(variant: str) -> None:
    sc = _one("gpu_thermal_throttle", variant)
    g = sc.faults[0].component
    ts, flag = _series(sc, g, "gpu_throttle_active", reason=variant)
    _, clock = _series(sc, g, "gpu_sm_clock_hz")
    _, temp = _series(sc, g, "gpu_temperature_celsius")
    hot = _in_fault(sc, ts)
    assert flag[hot].min() == 1 and flag[_outside(sc, ts)].max() == 0
    assert clock[hot].max() < 0.95 * np.median(clock[ts > 0])
    assert temp[hot].min() > np.median(temp[ts > 0]) + 8
    t = sc.truth[15]
    assert t.slow and (t.layer, t.component) == ("compute", g)


def test_pcie_downtrain_lowers_width_or_generation_and_slows_the_ring() -> None:
    for variant, metric in (("width", "pcie_link_width"), ("gen", "pcie_link_generation")):
        sc = _one("pcie_downtrain", variant)
        g = sc.faults[0].component
        ts, v = _series(sc, g, metric)
        _, vmax = _series(sc, g, metric + "_max")
        assert v[_in_fault(sc, ts)].max() < vmax[0] and v[_outside(sc, ts)].min() == vmax[0]
        assert sc.timeline.comm_mult[15] > 1.0  # its hop of the ring is slower too
        assert sc.truth[15].slow and sc.truth[15].component == g


def test_an_xid_is_an_event_on_its_gpu_at_the_start_of_the_fault() -> None:
    sc = _one("gpu_xid")
    f = sc.faults[0]
    xids = [e for e in sc.events_payload() if e["kind"] == "gpu_xid"]
    assert len(xids) == 1 and xids[0]["source"] == f.component and isinstance(xids[0]["attrs"]["code"], int)
    step_start = sc.t0 + float(sc.timeline.start[f.start_step].min())
    assert step_start - 2.5 <= xids[0]["start"] <= step_start + 0.5
    assert sc.truth[f.start_step].slow and sc.truth[f.start_step].component == f.component


def test_cpu_starved_loader_slows_the_hosts_data_phase_with_cpu_pressure() -> None:
    sc = _one("cpu_starved_loader")
    f = sc.faults[0]
    ts, v = _series(sc, f.component, "cpu_pressure_seconds_total", level="some")
    rate = np.diff(v) / np.diff(ts)
    hot = _in_fault(sc, ts[1:])
    assert rate[hot].min() > 3 * np.median(rate)
    host = np.asarray(sc.cluster.rank_host) == f.target
    assert sc.timeline.data[15, host].min() > 2 * sc.timeline.data[15, ~host].max()


def test_tcp_retransmits_rise_on_one_host_and_no_rdma_counter_moves() -> None:
    sc = _one("tcp_retransmits")
    f = sc.faults[0]
    host = sc.cluster.hosts[f.target]
    assert f.component == host  # two NICs per host: the host is named
    ts, v = _series(sc, host, "tcp_retransmitted_segments_total")
    rate = np.diff(v) / np.diff(ts)
    assert rate[_in_fault(sc, ts[1:])].min() > 20 * np.median(rate)
    calm = generate(SPEC, steps=24, faults=[], seed=1)
    for i, m in enumerate(sc.streams.metrics):
        if m.startswith("rdma_"):  # the network streams are those of the same seed without the fault
            assert sc.streams.sources[i] == calm.streams.sources[i]
            assert np.ptp(np.diff(sc.streams.values[i])) < 1e4


def test_new_kinds_are_in_the_table_with_their_layers() -> None:
    assert {k: FAULT_KINDS[k][0] for k in NEW} == {
        "gpu_thermal_throttle": "compute", "pcie_downtrain": "compute", "gpu_xid": "compute",
        "cpu_starved_loader": "host", "tcp_retransmits": "nic"}
