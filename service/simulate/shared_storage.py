"""The shared volume's streams (#15): one NFS/Lustre/object-gateway volume every host's data loader
reads each step, as its storage system's collector reports it (source `device:volume`).

Healthy: reads follow the job's data phases, the latency gauge wobbles around its own level (drawn
per run: nothing in the engine may assume one). `shared_volume_slow`: the latency rises several-fold
over the fault's window while ops and bytes keep their rate (the loaders still read every batch,
each read just takes longer). Its own generator, so adding it leaves a seed's other streams as they were.

#44: a job may write its checkpoints to this volume too (JobSpec.checkpoint_to "shared"): then it
also reports the writes, and a `storage_slow` `shared_ckpt` fault slows every host's write to it.
"""

from __future__ import annotations

import numpy as np

from fabricscope.service.simulate.counters import Streams
from fabricscope.service.simulate.faults import Fault, fault_window
from fabricscope.service.simulate.model import JobSpec, Timeline
from fabricscope.service.simulate.topology import Cluster

BATCH_BYTES = 2e9  # per host per second of loading, at full step rate
BATCH_OPS = 2e4


def _overlap(edges: np.ndarray, a: float, b: float) -> np.ndarray:
    lo, hi = np.maximum(edges[:-1], a), np.minimum(edges[1:], b)
    return np.clip(hi - lo, 0.0, None) / np.diff(edges)


def build_shared_storage_streams(cluster: Cluster, tl: Timeline, faults: list[Fault], *, rng: np.random.Generator,
                                 interval: float = 2.0, lead_s: float = 30.0, missing: float = 0.005,
                                 job: JobSpec | None = None) -> Streams:
    """Read bytes, read ops and read latency of the cluster's shared volume (empty without one), and
    its written bytes, write ops and write latency when the job (`job`) writes its checkpoints there."""
    source = cluster.shared_source
    job_end = float(tl.end[-1].max())
    edges = np.arange(-lead_s - interval, job_end + 2 * interval, interval)
    nt = len(edges) - 1
    if source is None:
        return Streams([], [], [], [], np.zeros((0, nt)), np.zeros((0, nt)), np.zeros((0, nt), bool))
    step_start, step_end = tl.start.min(axis=1), tl.end.max(axis=1)
    busy = np.zeros(nt)
    for s0, s1 in zip(step_start, step_end, strict=False):
        busy += _overlap(edges, s0, s1)
    busy = busy / max(busy.max(), 1e-9)
    hosts = len(cluster.hosts)
    level = float(rng.uniform(0.0005, 0.004))  # the volume's usual read latency
    latency = level * rng.normal(1.0, 0.1, nt).clip(0.5)
    for f in faults:
        if f.kind != "shared_volume_slow":
            continue
        frac = _overlap(edges, *fault_window(f, step_start, step_end))
        latency = latency * (1.0 + (rng.uniform(2.0, 6.0) - 1.0) * frac)
    dt = np.diff(edges)
    rates = np.vstack([busy * BATCH_BYTES * hosts, busy * BATCH_OPS * hosts]) * rng.normal(1.0, 0.02, (2, nt))
    counters = rng.integers(0, 2**40, (2, 1)).astype(float) + np.cumsum(np.round(rates * dt), axis=1)
    values = np.vstack([counters, latency[None, :]])
    ts = np.repeat((edges[1:] + rng.uniform(0, 0.2))[None, :], 3, axis=0)
    keep = rng.random(values.shape) >= missing
    keep[:, :2] = True
    reads = Streams([source] * 3, ["read_bytes_total", "read_ops_total", "read_latency_seconds"], [None] * 3,
                    ["counter", "counter", "gauge"], ts, values, keep)
    if job is None or job.checkpoint_to != "shared":
        return reads
    # drawn after the reads: the reads are the same whether or not checkpoints come here
    return _concat(reads, _checkpoint_writes(cluster, job, tl, edges, rng, missing))


def _checkpoint_writes(cluster: Cluster, job: JobSpec, tl: Timeline, edges: np.ndarray, rng: np.random.Generator,
                       missing: float) -> Streams:
    """#44: every host's checkpoint shard written to the shared volume. Bytes and ops rise while the
    hosts write; the write latency sits at an idle level of its own between checkpoints and at a
    writing level while they write, times how much longer than usual the writes took (a latency-bound
    write: a slow volume's writes take longer because each operation waits longer)."""
    nt = len(edges) - 1
    host = np.asarray(cluster.rank_host)
    idle, writing = float(rng.uniform(0.0003, 0.001)), float(rng.uniform(0.002, 0.006))
    rates = np.zeros((2, nt))
    lat_sum, weight = np.zeros(nt), np.zeros(nt)
    for s in np.flatnonzero(tl.ckpt_steps):
        for h in range(len(cluster.hosts)):
            r0 = int(np.flatnonzero(host == h)[0])
            w = float(tl.ckpt[s, r0])
            end = float(tl.coll_start[s, r0, -1])
            frac = _overlap(edges, end - w, end)
            rates[0] += frac * job.ckpt_bytes / max(w, 1e-3)
            rates[1] += frac * 4000
            lat_sum += frac * writing * rng.normal(1.0, 0.05) * w / job.ckpt_s
            weight += frac
    latency = np.where(weight > 0, lat_sum / np.where(weight > 0, weight, 1.0),
                       idle * rng.normal(1.0, 0.1, nt).clip(0.5))
    dt = np.diff(edges)
    counters = rng.integers(0, 2**40, (2, 1)).astype(float) + np.cumsum(np.round(rates * dt), axis=1)
    values = np.vstack([counters, latency[None, :]])
    ts = np.repeat((edges[1:] + rng.uniform(0, 0.2))[None, :], 3, axis=0)
    keep = rng.random(values.shape) >= missing
    keep[:, :2] = True
    source = cluster.shared_source or ""
    return Streams([source] * 3, ["write_bytes_total", "write_ops_total", "write_latency_seconds"], [None] * 3,
                   ["counter", "counter", "gauge"], ts, values, keep)


def _concat(a: Streams, b: Streams) -> Streams:
    return Streams(a.sources + b.sources, a.metrics + b.metrics, a.labels + b.labels, a.kinds + b.kinds,
                   np.vstack([a.ts, b.ts]), np.vstack([a.values, b.values]), np.vstack([a.keep, b.keep]))
