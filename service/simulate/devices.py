"""GPU and host telemetry of a simulated job (#17): every GPU (`host:gpuN`) and host emits the
canonical GPU, PCIe, TCP, PSI and CPU-throttle series with healthy noise, and the GPU/host fault kinds
add their signature. Same (series x time) matrices as counters.py, drawn from an rng of their own so
the network streams of a seed do not change when these are added.

The cluster's GPU model (maximum clock, PCIe generation, power, temperature) is drawn per scenario,
so the engine cannot rely on one set of numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fabricscope.service.simulate.counters import Streams
from fabricscope.service.simulate.faults import Fault, fault_window
from fabricscope.service.simulate.model import JobSpec, Timeline
from fabricscope.service.simulate.topology import Cluster

# XIDs a training job survives but that slow its GPU for a while (row remapping, contained ECC
# errors, engine resets, NVLink errors); 79 (fallen off the bus) would end the job instead.
XID_CODES = (13, 31, 43, 48, 63, 64, 74, 92, 94, 119)
ECC_XIDS = (48, 63, 64, 92, 94)
GPU_REASONS = ("gpu_idle", "sw_power_cap", "sw_thermal", "hw_slowdown")
# (metric, labels, kind): kind counter = events (Poisson), seconds = a time counter (PSI), gauge.
GPU_SERIES: list[tuple[str, dict[str, str] | None, str]] = [
    ("gpu_sm_clock_hz", None, "gauge"), ("gpu_sm_clock_max_hz", None, "gauge"),
    *[("gpu_throttle_active", {"reason": r}, "gauge") for r in GPU_REASONS],
    ("gpu_power_watts", None, "gauge"), ("gpu_temperature_celsius", None, "gauge"),
    ("gpu_utilization_ratio", None, "gauge"),
    ("gpu_ecc_errors_total", {"type": "corrected", "scope": "volatile"}, "counter"),
    ("gpu_nvlink_errors_total", {"type": "crc_flit"}, "counter"), ("pcie_replays_total", None, "counter"),
    ("pcie_link_width", None, "gauge"), ("pcie_link_width_max", None, "gauge"),
    ("pcie_link_generation", None, "gauge"), ("pcie_link_generation_max", None, "gauge"),
]
HOST_SERIES: list[tuple[str, dict[str, str] | None, str]] = [
    ("tcp_out_segments_total", None, "counter"), ("tcp_retransmitted_segments_total", None, "counter"),
    ("tcp_timeouts_total", None, "counter"), ("softnet_dropped_total", None, "counter"),
    ("cpu_pressure_seconds_total", {"level": "some"}, "seconds"),
    ("io_pressure_seconds_total", {"level": "some"}, "seconds"),
    ("memory_pressure_seconds_total", {"level": "some"}, "seconds"),
    ("cpu_thermal_throttle_total", {"scope": "package"}, "counter"),
]


@dataclass(frozen=True)
class GpuModel:
    max_clock_hz: float
    busy_share: float  # busy clock / max clock (power-capped GPUs run a little under their maximum)
    pcie_gen: int
    pcie_width: int
    power_w: float
    temp_c: float
    cap_share: float  # share of busy samples with sw_power_cap set

    @classmethod
    def draw(cls, rng: np.random.Generator) -> GpuModel:
        return cls(float(rng.choice([1410e6, 1755e6, 1980e6, 2100e6])), float(rng.uniform(0.92, 1.0)),
                   int(rng.choice([4, 5])), 16, float(rng.uniform(300, 700)), float(rng.uniform(45, 72)),
                   float(rng.uniform(0.0, 0.4)))


def _overlap(edges: np.ndarray, a: float, b: float) -> np.ndarray:
    lo, hi = np.maximum(edges[:-1], a), np.minimum(edges[1:], b)
    return np.clip(hi - lo, 0.0, None) / np.diff(edges)


def build_device_streams(cluster: Cluster, spec: JobSpec, tl: Timeline, faults: list[Fault], *,
                         rng: np.random.Generator, interval: float = 2.0, lead_s: float = 30.0,
                         host_skew: np.ndarray, missing: float = 0.005) -> tuple[Streams, list[dict[str, Any]]]:
    """GPU and host streams on counters.build_streams' time grid, and the XID events (true clock)."""
    job_end = float(tl.end[-1].max())
    edges = np.arange(-lead_s - interval, job_end + 2 * interval, interval)
    nt = len(edges) - 1
    step_start, step_end = tl.start.min(axis=1), tl.end.max(axis=1)
    busy = np.zeros(nt)
    for s0, s1 in zip(step_start, step_end, strict=False):
        busy += _overlap(edges, s0, s1)
    busy = np.clip(busy, 0.0, 1.0)
    on = busy > 0.2
    gm = GpuModel.draw(rng)
    gpus = [cluster.rank_source(r) for r in range(cluster.ranks)]
    sources: list[str] = []
    metrics: list[str] = []
    labels: list[dict[str, str] | None] = []
    kinds: list[str] = []
    rows: list[np.ndarray] = []
    index: dict[tuple[str, str, str], int] = {}

    def add(src: str, table: list[tuple[str, dict[str, str] | None, str]], values: dict[str, np.ndarray]) -> None:
        for metric, lab, kind in table:
            key = (src, metric, (lab or {}).get("reason", ""))
            index[key] = len(rows)
            sources.append(src)
            metrics.append(metric)
            labels.append(lab)
            kinds.append(kind)
            rows.append(values[metric if metric != "gpu_throttle_active" else f"throttle:{key[2]}"].astype(float))

    for g in gpus:
        busy_clk = gm.max_clock_hz * gm.busy_share * rng.normal(1.0, 0.004, nt)
        add(g, GPU_SERIES, {
            "gpu_sm_clock_hz": np.where(on, busy_clk, 0.3 * gm.max_clock_hz),
            "gpu_sm_clock_max_hz": np.full(nt, gm.max_clock_hz),
            "throttle:gpu_idle": (~on).astype(float),
            "throttle:sw_power_cap": (on & (rng.random(nt) < gm.cap_share)).astype(float),
            "throttle:sw_thermal": np.zeros(nt), "throttle:hw_slowdown": np.zeros(nt),
            "gpu_power_watts": np.where(on, gm.power_w * rng.normal(1.0, 0.03, nt), 0.15 * gm.power_w),
            "gpu_temperature_celsius": np.where(on, gm.temp_c, gm.temp_c - 15) + rng.normal(0, 0.7, nt),
            "gpu_utilization_ratio": np.where(on, np.clip(rng.normal(0.97, 0.01, nt), 0, 1), 0.0),
            "gpu_ecc_errors_total": np.full(nt, 0.001), "gpu_nvlink_errors_total": np.full(nt, 0.05 * busy),
            "pcie_replays_total": np.full(nt, 0.01),
            "pcie_link_width": np.full(nt, gm.pcie_width), "pcie_link_width_max": np.full(nt, gm.pcie_width),
            "pcie_link_generation": np.full(nt, gm.pcie_gen), "pcie_link_generation_max": np.full(nt, gm.pcie_gen),
        })
    seg_rate = float(rng.uniform(5e4, 3e5))
    for h in cluster.hosts:
        out = seg_rate * (0.1 + 0.9 * busy) * rng.normal(1.0, 0.05, nt)
        add(h, HOST_SERIES, {
            "tcp_out_segments_total": out,
            "tcp_retransmitted_segments_total": out * float(rng.uniform(1e-5, 1e-4)),
            "tcp_timeouts_total": np.full(nt, 0.01), "softnet_dropped_total": np.full(nt, 0.05),
            "cpu_pressure_seconds_total": float(rng.uniform(0.01, 0.06)) * (0.5 + busy),
            "io_pressure_seconds_total": np.full(nt, float(rng.uniform(0.001, 0.01))),
            "memory_pressure_seconds_total": np.full(nt, 0.001), "cpu_thermal_throttle_total": np.zeros(nt),
        })
    m = np.vstack(rows)
    events = _faults(m, index, cluster, spec, faults, edges, step_start, step_end, gm, rng)

    counter = np.array([k != "gauge" for k in kinds])
    dt = np.diff(edges)
    lam = np.clip(m[counter] * dt, 0, None)
    is_seconds = np.array([k == "seconds" for k in kinds])[counter]
    inc = np.where(is_seconds[:, None], lam * rng.gamma(20.0, 1 / 20.0, lam.shape), rng.poisson(lam))
    start = rng.uniform(1e4, 1e9, (int(counter.sum()), 1)).round()  # counters of a long-running host
    values = m.copy()
    values[counter] = start + np.cumsum(inc, axis=1)
    hidx = {h: i for i, h in enumerate(cluster.hosts)}
    offset = np.array([host_skew[hidx[s.split(":", 1)[0]]] for s in sources])
    uniq = list(dict.fromkeys(sources))
    phase = dict(zip(uniq, rng.uniform(0, 0.2, len(uniq)), strict=False))
    ts = edges[1:][None, :] + offset[:, None] + np.array([phase[s] for s in sources])[:, None]
    keep = rng.random(values.shape) >= missing
    keep[:, :2] = True
    return Streams(sources, metrics, labels, ["gauge" if k == "gauge" else "counter" for k in kinds], ts,
                   values, keep), events


def _faults(m: np.ndarray, index: dict[tuple[str, str, str], int], cluster: Cluster, spec: JobSpec,
            faults: list[Fault], edges: np.ndarray, step_start: np.ndarray, step_end: np.ndarray, gm: GpuModel,
            rng: np.random.Generator) -> list[dict[str, Any]]:
    """Each GPU/host fault's signature over the true-time window it was active in (in place)."""
    nominal = spec.nominal_step_s(cluster.ranks)
    events: list[dict[str, Any]] = []
    for f in faults:
        if f.kind not in ("gpu_thermal_throttle", "pcie_downtrain", "gpu_xid", "cpu_starved_loader",
                          "tcp_retransmits"):
            continue
        a, z = fault_window(f, step_start, step_end)
        frac = _overlap(edges, a, z)
        hit = frac > 0
        src = f.component if f.kind != "tcp_retransmits" else cluster.hosts[f.target]

        def ix(metric: str, reason: str = "", src: str = src) -> int:
            return index[(src, metric, reason)]

        if f.kind == "gpu_thermal_throttle":
            slow = 1.0 + f.severity * nominal / spec.compute_s  # the clock falls as much as compute slows
            m[ix("gpu_throttle_active", f.variant)] = np.where(hit, 1.0, m[ix("gpu_throttle_active", f.variant)])
            m[ix("gpu_sm_clock_hz")] = np.where(hit, m[ix("gpu_sm_clock_hz")] / slow, m[ix("gpu_sm_clock_hz")])
            m[ix("gpu_temperature_celsius")] += hit * rng.uniform(12, 25)
            m[ix("gpu_power_watts")] *= np.where(hit, 1 / slow, 1.0)
        elif f.kind == "pcie_downtrain":
            metric = "pcie_link_width" if f.variant == "width" else "pcie_link_generation"
            low = gm.pcie_width // int(rng.choice([2, 4])) if f.variant == "width" else gm.pcie_gen - int(
                rng.integers(1, 3))
            m[ix(metric)] = np.where(hit, low, m[ix(metric)])
            m[ix("pcie_replays_total")] += frac * rng.uniform(0, 30)
        elif f.kind == "gpu_xid":
            code = int(rng.choice(XID_CODES))
            t = a - float(rng.uniform(0.0, 2.0))  # logged as the error happens, at or just before the step
            events.append({"kind": "gpu_xid", "source": src, "start": t, "attrs": {"code": code}})
            if code in ECC_XIDS:
                m[ix("gpu_ecc_errors_total")] += frac * rng.uniform(1, 20)
        elif f.kind == "cpu_starved_loader":
            m[ix("cpu_pressure_seconds_total")] += frac * rng.uniform(0.3, 0.9)
        else:  # tcp_retransmits: losses on the host's path; the job's segments are retransmitted
            loss = f.severity * rng.uniform(0.02, 0.1)
            m[ix("tcp_retransmitted_segments_total")] += frac * m[ix("tcp_out_segments_total")] * loss
            m[ix("tcp_timeouts_total")] += frac * f.severity * rng.uniform(5, 40)
    return events
