"""Counter and gauge streams for every NIC, switch port and volume, as (series × time) matrices.

Rates are built per sample interval from the job's traffic and background noise, faults add
their signature over the true-time window they were active in, then counters are integrated
(cumulative `_total`, random large start offsets) and gauges sampled. Everything is numpy over
whole matrices; nothing loops per sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fabricscope.service.simulate.fabric_signals import (
    PACKET_BYTES,
    TRAFFIC_PACKETS,
    ib_congestion,
    ib_link_recovery,
    nic_table,
    port_table,
    queue_incast,
    roce_queue_extras,
)
from fabricscope.service.simulate.faults import CKPT_LATENCY, SHARED_CKPT, Fault, fault_window
from fabricscope.service.simulate.model import JobSpec, Timeline
from fabricscope.service.simulate.topology import Cluster

P3 = {"priority": "3"}

# metric, labels, background rate (per second; traffic-scaled metrics use "traffic"), kind
NIC_METRICS: list[tuple[str, dict[str, str] | None, float | str, str]] = [
    ("rx_bytes_total", None, "traffic", "counter"),
    ("tx_bytes_total", None, "traffic", "counter"),
    ("rx_discards_total", None, 0.02, "counter"),
    ("rx_out_of_buffer_total", None, 0.5, "counter"),
    ("tx_pause_frames_total", P3, 2.0, "counter"),
    ("rx_pause_frames_total", P3, 5.0, "counter"),
    ("ecn_marked_packets_total", None, 100.0, "counter"),
    ("cnp_sent_total", None, 30.0, "counter"),
    ("cnp_handled_total", None, 30.0, "counter"),
    ("rx_fcs_errors_total", None, 0.002, "counter"),
    ("symbol_errors_total", None, 0.01, "counter"),
    ("link_down_total", None, 0.0, "counter"),
    ("rdma_retransmits_total", None, 0.5, "counter"),
]
PORT_METRICS: list[tuple[str, dict[str, str] | None, float | str, str]] = [
    ("rx_bytes_total", None, "traffic", "counter"),
    ("tx_bytes_total", None, "traffic", "counter"),
    ("rx_pause_frames_total", P3, 5.0, "counter"),
    ("tx_pause_frames_total", P3, 5.0, "counter"),
    ("ecn_marked_packets_total", None, 300.0, "counter"),
    ("tx_discards_total", None, 0.05, "counter"),
    ("rx_fcs_errors_total", None, 0.002, "counter"),
    ("symbol_errors_total", None, 0.02, "counter"),
    ("link_down_total", None, 0.0, "counter"),
]
DATA_METRICS = [("read_bytes_total", None, 0.0, "counter"), ("read_ops_total", None, 0.0, "counter"),
                ("read_latency_seconds", None, 0.0008, "gauge")]
CKPT_METRICS = [("write_bytes_total", None, 0.0, "counter"), ("write_ops_total", None, 0.0, "counter"),
                ("write_latency_seconds", None, 0.0005, "gauge")]


@dataclass
class Streams:
    sources: list[str]  # per series
    metrics: list[str]
    labels: list[dict[str, str] | None]
    kinds: list[str]
    ts: np.ndarray  # (N, T) true-clock seconds incl. per-source clock offset
    values: np.ndarray  # (N, T)
    keep: np.ndarray  # (N, T) bool: False = a missing sample


class _Builder:
    def __init__(self, n_times: int) -> None:
        self.sources: list[str] = []
        self.metrics: list[str] = []
        self.labels: list[dict[str, str] | None] = []
        self.kinds: list[str] = []
        self.base: list[float | str] = []
        self.index: dict[tuple[str, str], int] = {}
        self.labelled: dict[tuple[str, str, str], int] = {}
        self.n_times = n_times

    def add(self, source: str, table: Sequence[tuple[str, dict[str, str] | None, float | str, str]]) -> None:
        for metric, labels, base, kind in table:
            # (source, metric) is the first (unlabelled) series; a queue's is keyed by its labels too
            self.index.setdefault((source, metric), len(self.sources))
            self.labelled[(source, metric, _key(labels))] = len(self.sources)
            self.sources.append(source)
            self.metrics.append(metric)
            self.labels.append(labels)
            self.kinds.append(kind)
            self.base.append(base)


def _key(labels: dict[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items()))


def _overlap(edges: np.ndarray, a: float, b: float) -> np.ndarray:
    """Fraction of each interval (edges[j-1], edges[j]] covered by [a, b]."""
    lo = np.maximum(edges[:-1], a)
    hi = np.minimum(edges[1:], b)
    return np.clip(hi - lo, 0.0, None) / np.diff(edges)


def _latency_bound_write(cluster: Cluster, spec: JobSpec, tl: Timeline, f: Fault, edges: np.ndarray,
                         lat: np.ndarray) -> None:
    """A `ckpt_latency` fault on a host's checkpoint volume, in place on that volume's write latency
    `lat`: while the host writes a checkpoint in the fault's steps, each write waits as many times its
    usual latency as the write took longer than usual (a latency-bound write), so a write three times
    as long shows three times the latency."""
    if spec.checkpoint_to != "local":
        return  # the job writes elsewhere: nothing waits on this volume
    r0 = int(np.flatnonzero(np.asarray(cluster.rank_host) == f.target // 2)[0])
    for s in np.flatnonzero(tl.ckpt_steps):
        if f.active(int(s)):
            w = float(tl.ckpt[s, r0])
            frac = _overlap(edges, float(tl.coll_start[s, r0, -1]) - w, float(tl.coll_start[s, r0, -1]))
            lat[:] = np.where(frac > 0, lat * w / spec.ckpt_s, lat)


def build_streams(cluster: Cluster, spec: JobSpec, tl: Timeline, faults: list[Fault], *,
                  rng: np.random.Generator, interval: float = 2.0, lead_s: float = 30.0,
                  host_skew: np.ndarray, missing: float = 0.005) -> Streams:
    job_end = float(tl.end[-1].max())
    edges = np.arange(-lead_s - interval, job_end + 2 * interval, interval)
    t_mid = edges[1:]
    nt = len(t_mid)
    b = _Builder(nt)
    nic_metrics, port_metrics = nic_table(NIC_METRICS, cluster.spec), port_table(PORT_METRICS, cluster.spec)
    for n in cluster.nics:
        b.add(n, nic_metrics)
    for p in cluster.switch_ports:
        b.add(p, port_metrics)
    for i, v in enumerate(cluster.volumes):
        b.add(v, DATA_METRICS if i % 2 == 0 else CKPT_METRICS)
    n_series = len(b.sources)

    # Job traffic per NIC over time: the all-reduce volume of the step, spread over the step.
    gpus_per_nic = cluster.spec.gpus_per_host / cluster.spec.nics_per_host
    step_start, step_end = tl.start.min(axis=1), tl.end.max(axis=1)
    bytes_per_step = 2 * sum(spec.bucket_bytes) * gpus_per_nic
    traffic = np.zeros(nt)
    for s0, s1 in zip(step_start, step_end, strict=False):
        traffic += _overlap(edges, s0, s1) * bytes_per_step / max(s1 - s0, 1e-6)
    busy = traffic / max(traffic.max(), 1.0)

    rate = np.zeros((n_series, nt))
    is_traffic = np.array([x == "traffic" for x in b.base])
    base = np.array([0.0 if isinstance(x, str) else float(x) for x in b.base])
    rate[is_traffic] = traffic * rng.normal(1.0, 0.02, (int(is_traffic.sum()), nt))
    rate[~is_traffic] = base[~is_traffic, None] * (0.3 + 0.7 * busy)
    is_pk = np.array([x == TRAFFIC_PACKETS for x in b.base])
    rate[is_pk] = traffic / PACKET_BYTES * rng.normal(1.0, 0.02, (int(is_pk.sum()), nt))
    gauge = np.array([k == "gauge" for k in b.kinds])
    rate[gauge] = base[gauge, None] * rng.normal(1.0, 0.1, (int(gauge.sum()), nt)).clip(0.5)

    # Storage I/O: reads every step, checkpoint writes on checkpoint steps.
    data_ix = np.array([b.index[(v, "read_bytes_total")] for v in cluster.volumes[0::2]])
    rate[data_ix] = (busy * 2e9)[None, :]
    rate[data_ix + 1] = (busy * 2e4)[None, :]
    host_of_rank = np.asarray(cluster.rank_host)
    ckpt_ix = np.array([b.index[(v, "write_bytes_total")] for v in cluster.volumes[1::2]])
    # #44: shards written to the shared volume are its storage system's writes (shared_storage.py):
    # the hosts' own checkpoint mounts stay idle
    local_writes = tl.ckpt_steps if spec.checkpoint_to == "local" else np.zeros_like(tl.ckpt_steps)
    for s in np.flatnonzero(local_writes):
        for h in range(len(cluster.hosts)):
            r0 = int(np.flatnonzero(host_of_rank == h)[0])
            a = float(tl.coll_start[s, r0, -1] - tl.ckpt[s, r0])
            frac = _overlap(edges, a, a + float(tl.ckpt[s, r0]))
            dur = max(float(tl.ckpt[s, r0]), 1e-3)
            rate[ckpt_ix[h]] += frac * spec.ckpt_bytes / dur
            rate[ckpt_ix[h] + 1] += frac * 4000
            rate[ckpt_ix[h] + 2] = np.where(frac > 0, 0.004 * rng.normal(1, 0.05), rate[ckpt_ix[h] + 2])

    def win(f: Fault) -> tuple[float, float]:
        return fault_window(f, step_start, step_end)

    def bump(source: str, metric: str, amount: float, frac: np.ndarray, labels: dict[str, str] | None = None) -> None:
        # a metric the fabric does not have (FCS on InfiniBand) is simply not reported
        ix = b.index.get((source, metric)) if labels is None else b.labelled.get((source, metric, _key(labels)))
        if ix is not None:
            rate[ix] += amount * frac

    peer: dict[str, str] = {}
    for x, y in ((cluster.nics, cluster.leaf_down), (cluster.leaf_up, cluster.spine_ports)):
        peer |= dict(zip(x, y, strict=True)) | dict(zip(y, x, strict=True))
    flaps: list[tuple[str, float]] = []
    for f in faults:
        if f.kind in ("gpu_straggler", "host_contention", "level_change"):
            continue  # no counter signature: the engine must find these from timings
        a, z = win(f)
        frac = _overlap(edges, a, z)
        sev = f.severity * rng.uniform(0.7, 1.3)
        if f.kind == "nic_degradation":
            nic = cluster.nics[f.target]
            bump(nic, "rx_out_of_buffer_total", sev * 1e5, frac)
            bump(nic, "tx_pause_frames_total", sev * 2e5, frac)
            bump(peer[nic], "rx_pause_frames_total", sev * 2e5, frac)
            bump(nic, "rdma_retransmits_total", sev * 300, frac)
        elif f.kind == "link_errors":
            port = f.component
            side = port if rng.random() < 0.6 else peer[port]
            bump(side, "rx_fcs_errors_total", sev * 3e3, frac)
            bump(side, "symbol_errors_total", sev * 3e4, frac)
            nic_side = port if port in cluster.nics else peer[port]
            if nic_side in cluster.nics:
                bump(nic_side, "rdma_retransmits_total", sev * 800, frac)
        elif f.kind == "link_flap":
            # a flapping link (a bad optic) goes down every couple of seconds and errors in between
            flaps += [(f.component, t) for t in np.arange(a + 0.1, z, 2.0)]
            bump(f.component, "symbol_errors_total", sev * 2e3, frac)
            nic_side = peer[f.component]
            if nic_side in cluster.nics:
                bump(nic_side, "rdma_retransmits_total", sev * 500, frac)
        elif f.kind == "fabric_congestion":
            port = f.component
            pfc = f.variant.endswith("pfc")
            bump(port, "ecn_marked_packets_total", sev * (3e5 if pfc else 2e6), frac)
            if pfc:
                bump(port, "tx_pause_frames_total", sev * 3e5, frac)
                bump(peer[port], "rx_pause_frames_total", sev * 3e5, frac)
            bump(port, "tx_discards_total", sev * 400, frac)
            if port in cluster.leaf_down:  # from the cluster's lists, never from a name (#15)
                leaf = port.split(":")[0] + ":"
                for up in cluster.leaf_up:  # congestion spreads upstream at a fraction
                    if up.startswith(leaf):
                        bump(up, "tx_pause_frames_total", sev * 2e4, frac)
            for nic in cluster.nics:  # senders slow down on CNPs: uniform, not a localizer
                bump(nic, "cnp_handled_total", sev * 800, frac)
        elif f.kind == "queue_incast":
            queue_incast(cluster, f, sev, frac, bump, peer, rng)
        elif f.kind == "ib_congestion":
            ib_congestion(cluster, f, sev, frac, bump, peer, rng)
        elif f.kind == "storage_slow" and f.variant == SHARED_CKPT:
            pass  # the storage system's volume: shared_storage.py
        elif f.kind == "storage_slow" and f.variant == CKPT_LATENCY:
            lat_row = rate[b.index[(cluster.volumes[f.target], "write_latency_seconds")]]  # a view: edited in place
            _latency_bound_write(cluster, spec, tl, f, edges, lat_row)
        elif f.kind == "storage_slow":
            vol = cluster.volumes[f.target]
            metric = "write_latency_seconds" if f.variant == "ckpt" else "read_latency_seconds"
            ix = b.index[(vol, metric)]
            if f.variant == "ckpt":
                lat = rate[ix].copy()
                writing = lat > 0.002
                rate[ix] = np.where((frac > 0) & writing, lat * (1 + 40 * sev), lat)
            else:
                rate[ix] = rate[ix] * (1 + 200 * sev * frac)

        if cluster.spec.fabric == "ib" and f.kind in ("link_errors", "link_flap"):
            ib_link_recovery(f, sev, frac, bump, peer, rng)
        elif cluster.spec.fabric == "roce" and f.kind in ("fabric_congestion", "nic_degradation"):
            roce_queue_extras(cluster, f, sev, frac, bump, peer, rng)

    dt = np.diff(edges)
    counter = ~gauge
    lam = np.clip(rate[counter] * dt, 0, None)
    small = lam < 1e7
    inc = np.where(small, rng.poisson(np.where(small, lam, 0.0)), lam)
    for src, t in flaps:  # a flap counts once on both ends
        for end in (src, peer[src]):
            j = int(np.searchsorted(edges, t) - 1)
            if 0 <= j < nt:
                inc[int(np.searchsorted(np.flatnonzero(counter), b.index[(end, "link_down_total")])), j] += 1
    start = rng.integers(0, 2**40, (int(counter.sum()), 1)).astype(float)
    start[lam.mean(axis=1) < 1e3] = rng.integers(0, 1000, (int((lam.mean(axis=1) < 1e3).sum()), 1))
    values = np.empty_like(rate)
    values[counter] = start + np.cumsum(inc, axis=1)
    values[gauge] = rate[gauge]

    # Host-side sources carry their host's clock skew; switches are NTP-close.
    dev = [s.split(":", 1)[0] for s in b.sources]
    hidx = {h: i for i, h in enumerate(cluster.hosts)}
    offset = np.array([host_skew[hidx[d]] if d in hidx else 0.0 for d in dev])
    uniq = list(dict.fromkeys(b.sources))  # one poll reads all counters of a source together
    src_phase = dict(zip(uniq, rng.uniform(0, 0.2, len(uniq)), strict=False))
    phase = np.array([src_phase[s] for s in b.sources])
    ts = t_mid[None, :] + offset[:, None] + phase[:, None]
    keep = rng.random((n_series, nt)) >= missing
    keep[:, :2] = True
    return Streams(b.sources, b.metrics, b.labels, b.kinds, ts, values, keep)
