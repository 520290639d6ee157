"""Timing model of a synchronous data-parallel job, vectorized over ranks.

Each rank, each step: load a batch (`data`), run forward and backward in K buckets, each bucket
followed by a blocking ring all-reduce, then the optimizer; every `ckpt_every` steps each host
writes a checkpoint shard, then all ranks meet in a barrier. A collective ends for everyone when
the last rank has arrived plus the ring transfer time, so the late rank waits least — the
signature the engine uses to tell a straggler from a slow fabric.

All noise is drawn once (`Noise`) so the model can be re-run with any subset of faults: the step
time a fault adds is the difference with the fault-free run on identical noise (ground truth).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from fabricscope.core.errors import ConfigError
from fabricscope.service.simulate.faults import LEVEL_CHANGE, SHARED_CKPT, Fault
from fabricscope.service.simulate.topology import Cluster

MiB = 1024 * 1024
# Share of a PCIe downtrain's delay spent in the GPU's own work (host<->device copies); the rest
# slows its hop of the ring, so every rank waits longer in the collectives (#17).
PCIE_COMPUTE_SHARE = 0.5


@dataclass(frozen=True)
class JobSpec:
    data_s: float = 0.06
    compute_s: float = 1.6  # forward + backward compute, without communication
    optimizer_s: float = 0.09
    bucket_bytes: tuple[int, ...] = (512 * MiB, 512 * MiB, 512 * MiB, 256 * MiB)
    bus_bw_Bps: float = 12.5e9  # effective ring bandwidth per rank
    hop_latency_s: float = 8e-6
    ckpt_every: int = 10
    ckpt_s: float = 0.8  # per-host shard write time
    ckpt_bytes: int = 4 * 1024 * MiB
    first_step_factor: float = 3.0  # graph capture / compilation on step 0
    compute_noise: float = 0.004
    comm_noise: float = 0.02
    # #15: extra step-to-step spread of a healthy job (batches differ: sequence lengths, routing), as a
    # share of the step; it acts on every rank's compute alike. 0: the per-rank noise above only.
    step_jitter: float = 0.0
    # #44: how the job marks its checkpoint writes. "events": a `checkpoint` event per host naming the
    # volume written (rec.checkpoint), and the phase; "phase": rec.phase("checkpoint") only, the phase
    # at checkpoint steps and no event; "none": neither, the write is an unlabelled part of the step.
    # Only the payloads differ: the timings and the telemetry are the same in all three.
    checkpoint_marks: Literal["events", "phase", "none"] = "events"
    # #44: where the hosts write their shards: "local" each to its own checkpoint mount, "shared" all
    # to the cluster's shared volume (ClusterSpec.storage_device), mounted on every host at the
    # checkpoint mount path; that volume's storage system reports the writes, the hosts do not.
    checkpoint_to: Literal["local", "shared"] = "local"

    def __post_init__(self) -> None:
        if self.checkpoint_marks not in ("events", "phase", "none"):
            raise ConfigError(f"checkpoint_marks must be events, phase or none, not {self.checkpoint_marks!r}")
        if self.checkpoint_to not in ("local", "shared"):
            raise ConfigError(f"checkpoint_to must be local or shared, not {self.checkpoint_to!r}")

    def transfer_s(self, n: int) -> np.ndarray:
        b = np.asarray(self.bucket_bytes, dtype=float)
        return 2 * (n - 1) / max(n, 1) * b / self.bus_bw_Bps + 2 * (n - 1) * self.hop_latency_s

    def nominal_step_s(self, n: int) -> float:
        return self.data_s + self.compute_s + self.optimizer_s + float(self.transfer_s(n).sum())


@dataclass
class Noise:
    """Every random draw of a run, fixed so runs with different fault sets are comparable."""

    data: np.ndarray  # (S, R)
    comp: np.ndarray  # (S, R, K+1)
    opt: np.ndarray  # (S, R)
    comm: np.ndarray  # (S, K+1)
    exit: np.ndarray  # (S, R, K+1) per-rank exit jitter after a collective
    ckpt: np.ndarray  # (S, H)
    fault: np.ndarray  # (S,) fault intensity wobble
    step: np.ndarray | None = None  # (S,) compute factor common to all ranks (JobSpec.step_jitter)

    @classmethod
    def draw(cls, rng: np.random.Generator, steps: int, cluster: Cluster, spec: JobSpec) -> Noise:
        r, k, h = cluster.ranks, len(spec.bucket_bytes), len(cluster.hosts)
        comp = rng.normal(1.0, spec.compute_noise, (steps, r, k + 1))
        # rare small hiccups (GC, page faults): realistic tails the detector must tolerate
        hic = rng.random((steps, r, k + 1)) < 0.002
        comp = comp + hic * rng.uniform(0.005, 0.04, (steps, r, k + 1))
        return cls(
            data=rng.lognormal(0.0, 0.08, (steps, r)),
            comp=comp,
            opt=rng.normal(1.0, 0.01, (steps, r)),
            comm=np.clip(rng.normal(1.0, spec.comm_noise, (steps, k + 1)), 0.9, 1.2),
            exit=rng.uniform(0.0, 3e-4, (steps, r, k + 1)),
            ckpt=rng.normal(1.0, 0.03, (steps, h)),
            fault=rng.uniform(0.85, 1.15, steps),
            # drawn only when asked for, so a seed's other draws stay as they were without it
            step=rng.normal(1.0, spec.step_jitter * spec.nominal_step_s(r) / spec.compute_s, steps).clip(0.8)
            if spec.step_jitter > 0 else None,
        )


@dataclass
class Timeline:
    """True-clock times (seconds from job start) of every rank's steps and collectives."""

    start: np.ndarray  # (S, R)
    end: np.ndarray  # (S, R)
    data: np.ndarray  # (S, R)
    fb: np.ndarray  # (S, R) forward_backward including its blocking all-reduces
    opt: np.ndarray  # (S, R)
    ckpt: np.ndarray  # (S, R) own checkpoint write
    coll_start: np.ndarray  # (S, R, K+1), last column = checkpoint barrier (NaN when none)
    coll_end: np.ndarray
    comm_mult: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (S,)
    ckpt_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def step_duration(self) -> np.ndarray:
        return np.median(self.end - self.start, axis=1)


def run(cluster: Cluster, spec: JobSpec, noise: Noise, faults: list[Fault]) -> Timeline:
    steps, r = noise.data.shape
    k = len(spec.bucket_bytes)
    host = np.asarray(cluster.rank_host)
    nominal = spec.nominal_step_s(r)
    transfer = spec.transfer_s(r)
    seg = np.full(k + 1, spec.compute_s * 0.65 / k)
    seg[0] = spec.compute_s * 0.35  # forward pass before the first bucket's backward
    out = {n: np.zeros((steps, r)) for n in ("start", "end", "data", "fb", "opt", "ckpt")}
    cs = np.full((steps, r, k + 1), np.nan)
    ce = np.full((steps, r, k + 1), np.nan)
    comm_mults = np.ones(steps)
    ckpt_steps = np.zeros(steps, bool)
    t = np.zeros(r)
    for s in range(steps):
        comp_mult = np.ones(r)
        data_add = np.zeros(r)
        ckpt_mult = np.ones(len(cluster.hosts))
        comm_mult = 1.0
        for f in faults:
            if f.kind == LEVEL_CHANGE:
                if s >= f.start_step:
                    comp_mult *= 1.0 + f.severity
                continue
            if not f.active(s):
                continue
            extra = f.severity * noise.fault[s] * nominal * f.cover(s)  # #15: a partly covered step
            if f.kind == "gpu_straggler":
                comp_mult[f.target] *= 1.0 + extra / spec.compute_s
            elif f.kind == "host_contention":
                on = host == f.target
                data_add[on] += extra
                comp_mult[on] *= 1.01
            elif f.kind == "storage_slow" and f.variant == "data":
                data_add[host == f.target // 2] += extra
            elif f.kind == "storage_slow":
                # a checkpoint volume slows the writes only when the job writes its shards there
                if (f.variant == SHARED_CKPT) != (spec.checkpoint_to == "shared"):
                    continue
                if f.variant == SHARED_CKPT:  # #44: every host writes to the one slow volume
                    ckpt_mult *= 1.0 + extra / spec.ckpt_s
                else:
                    ckpt_mult[f.target // 2] *= 1.0 + extra / spec.ckpt_s
            elif f.kind == "shared_volume_slow":  # #15: every loader waits on the same volume
                data_add += extra
            elif f.kind in ("gpu_thermal_throttle", "gpu_xid"):  # #17: one GPU computes slower
                comp_mult[f.target] *= 1.0 + extra / spec.compute_s
            elif f.kind == "pcie_downtrain":  # #17: its copies and its hop of the ring are slower
                comp_mult[f.target] *= 1.0 + PCIE_COMPUTE_SHARE * extra / spec.compute_s
                comm_mult = max(comm_mult, 1.0 + (1.0 - PCIE_COMPUTE_SHARE) * extra / float(transfer.sum()))
            elif f.kind == "cpu_starved_loader":  # #17: the host's loaders wait for CPU
                data_add[host == f.target] += extra
            else:  # nic / link / fabric / tcp: the ring runs at the speed of its worst hop
                comm_mult = max(comm_mult, 1.0 + extra / float(transfer.sum()))
        comm_mults[s] = comm_mult
        first = spec.first_step_factor if s == 0 else 1.0
        first *= 1.0 if noise.step is None else float(noise.step[s])
        data = spec.data_s * noise.data[s] + data_add
        out["start"][s] = t
        out["data"][s] = data
        a = t + data
        fb_start = a.copy()
        for b in range(k):
            a = a + seg[b] * comp_mult * noise.comp[s, :, b] * first
            if b == k - 1:
                a = a + seg[k] * comp_mult * noise.comp[s, :, k] * first
            cs[s, :, b] = a
            done = a.max() + transfer[b] * noise.comm[s, b] * comm_mult
            ce[s, :, b] = done + noise.exit[s, :, b]
            a = ce[s, :, b]
        out["fb"][s] = a - fb_start
        opt = spec.optimizer_s * noise.opt[s]
        out["opt"][s] = opt
        a = a + opt
        if spec.ckpt_every and s > 0 and s % spec.ckpt_every == 0:
            ckpt_steps[s] = True
            w = (spec.ckpt_s * noise.ckpt[s] * ckpt_mult)[host]
            out["ckpt"][s] = w
            a = a + w
            cs[s, :, k] = a
            done = a.max() + 0.002 * noise.comm[s, k]
            ce[s, :, k] = done + noise.exit[s, :, k]
            a = ce[s, :, k]
        out["end"][s] = a
        t = a
    return Timeline(out["start"], out["end"], out["data"], out["fb"], out["opt"], out["ckpt"], cs, ce,
                    comm_mults, ckpt_steps)
