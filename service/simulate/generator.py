"""A pure scenario generator: topology, rank placement, samples, steps, collectives and events as
docs/API.md JSON payloads, plus the per-step ground truth. No I/O here (see send.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fabricscope.core.errors import ConfigError
from fabricscope.service.simulate.counters import Streams, build_streams
from fabricscope.service.simulate.devices import build_device_streams
from fabricscope.service.simulate.faults import LEVEL_CHANGE, Fault, random_plan
from fabricscope.service.simulate.model import JobSpec, Noise, Timeline, run
from fabricscope.service.simulate.shared_storage import build_shared_storage_streams
from fabricscope.service.simulate.topology import Cluster, ClusterSpec, build_cluster
from fabricscope.service.simulate.variation import Variation

SLOW_TRUTH = 0.06  # a fault adding >= 6% to the step is a slow step the engine must find
HEALTHY_TRUTH = 0.03  # under 3% the step counts as healthy; in between is not scored


@dataclass
class StepTruth:
    step: int
    duration_s: float
    fault_free_s: float
    delay_s: float
    slow: bool | None  # None: in the grey zone between HEALTHY_TRUTH and SLOW_TRUTH
    causes: list[dict[str, Any]] = field(default_factory=list)  # worst first

    @property
    def layer(self) -> str:
        return self.causes[0]["layer"] if self.causes else "none"

    @property
    def component(self) -> str | None:
        return self.causes[0]["component"] if self.causes else None


@dataclass
class Scenario:
    cluster: Cluster
    spec: JobSpec
    job: str
    t0: float
    faults: list[Fault]
    timeline: Timeline
    streams: Streams
    host_skew: np.ndarray
    truth: dict[int, StepTruth]
    dropped_steps: np.ndarray  # (S, R) bool
    dropped_coll: np.ndarray  # (S, R, K+1) bool
    device_events: list[dict[str, Any]] = field(default_factory=list)  # GPU XIDs, true clock (#17)

    def topology_body(self) -> dict[str, Any]:
        return self.cluster.topology_body()

    def job_body(self) -> dict[str, Any]:
        return self.cluster.job_body({"simulated": "true"})

    def _clock(self) -> np.ndarray:
        return self.t0 + self.host_skew[np.asarray(self.cluster.rank_host)]  # per rank

    def steps_payload(self) -> list[dict[str, Any]]:
        tl, clock = self.timeline, self._clock()
        out = []
        marks = self.spec.checkpoint_marks
        for s, r in zip(*np.nonzero(~self.dropped_steps), strict=False):
            phases = {"data": round(float(tl.data[s, r]), 6), "forward_backward": round(float(tl.fb[s, r]), 6),
                      "optimizer": round(float(tl.opt[s, r]), 6)}
            # #44: rec.phase("checkpoint") alone reports the phase in the steps that ran it; unmarked,
            # the write is the part of the step no phase covers
            if marks == "events" or (marks == "phase" and tl.ckpt_steps[s]):
                phases["checkpoint"] = round(float(tl.ckpt[s, r]), 6)
            out.append({"rank": int(r), "step": int(s), "start": float(tl.start[s, r] + clock[r]),
                        "end": float(tl.end[s, r] + clock[r]), "phases": phases})
        return out

    def collectives_payload(self) -> list[dict[str, Any]]:
        tl, clock = self.timeline, self._clock()
        k = len(self.spec.bucket_bytes)
        n = self.cluster.ranks
        ok = ~self.dropped_coll & ~np.isnan(tl.coll_start)
        out = []
        for s, r, b in zip(*np.nonzero(ok), strict=False):
            barrier = b == k
            out.append({"rank": int(r), "step": int(s), "seq": int(s * (k + 1) + b),
                        "op": "barrier" if barrier else "all_reduce",
                        "bytes": 0 if barrier else int(self.spec.bucket_bytes[b]),
                        "start": float(tl.coll_start[s, r, b] + clock[r]),
                        "end": float(tl.coll_end[s, r, b] + clock[r]), "group": "dp0", "group_size": n})
        return out

    def events_payload(self) -> list[dict[str, Any]]:
        tl = self.timeline
        out: list[dict[str, Any]] = []
        host = np.asarray(self.cluster.rank_host)
        # #44: only a job that uses rec.checkpoint posts checkpoint events. Its events name the
        # mount written as the hook does (host:/mount), the shared volume's mount too.
        for s in np.flatnonzero(tl.ckpt_steps if self.spec.checkpoint_marks == "events" else np.zeros(0, bool)):
            for h in range(len(self.cluster.hosts)):
                r = int(np.flatnonzero(host == h)[0])
                end = float(tl.coll_start[s, r, -1]) + self.t0 + float(self.host_skew[h])
                out.append({"kind": "checkpoint", "source": self.cluster.volumes[2 * h + 1], "job": self.job,
                            "start": end - float(tl.ckpt[s, r]), "end": end,
                            "attrs": {"step": int(s), "bytes": self.spec.ckpt_bytes}})
        for e in self.device_events:  # #17: XIDs, on their host's clock
            h = self.cluster.hosts.index(e["source"].split(":", 1)[0])
            out.append({**e, "job": self.job, "start": e["start"] + self.t0 + float(self.host_skew[h])})
        return out

    def sample_batches(self, size: int = 5000) -> Iterator[list[dict[str, Any]]]:
        """Samples in time order, as the collectors would send them, `size` at most per batch."""
        st = self.streams
        keep_t = st.keep.T  # time-major
        ser, tix = np.nonzero(keep_t)[1], np.nonzero(keep_t)[0]
        ts = st.ts.T[keep_t] + self.t0
        vals = st.values.T[keep_t]
        for i in range(0, len(ts), size):
            batch = []
            for j in range(i, min(i + size, len(ts))):
                k = int(ser[j])
                d: dict[str, Any] = {"ts": float(ts[j]), "source": st.sources[k], "metric": st.metrics[k],
                                     "value": float(vals[j])}
                if st.labels[k]:
                    d["labels"] = st.labels[k]
                batch.append(d)
            yield batch
        del tix

    @property
    def n_samples(self) -> int:
        return int(self.streams.keep.sum())


def _truth(cluster: Cluster, spec: JobSpec, noise: Noise, faults: list[Fault],
           tl_all: Timeline, slow_truth: float = SLOW_TRUTH,
           healthy_truth: float = HEALTHY_TRUTH) -> dict[int, StepTruth]:
    legit = [f for f in faults if f.kind == LEVEL_CHANGE]
    real = [f for f in faults if f.kind != LEVEL_CHANGE]
    d_none = run(cluster, spec, noise, legit).step_duration()
    d_all = tl_all.step_duration()
    alone = {i: run(cluster, spec, noise, legit + [f]).step_duration() - d_none for i, f in enumerate(real)}
    out: dict[int, StepTruth] = {}
    for s in range(len(d_all)):
        delay = float(d_all[s] - d_none[s])
        causes: list[dict[str, Any]] = [
            {"kind": f.kind, "layer": f.layer, "component": f.component, "delay_s": float(alone[i][s])}
            for i, f in enumerate(real) if f.active(s) and alone[i][s] > healthy_truth * d_none[s] / 2]
        causes.sort(key=lambda c: -c["delay_s"])
        rel = delay / d_none[s]
        slow = True if rel >= slow_truth else (False if rel < healthy_truth else None)
        if not slow:
            causes = [] if slow is False else causes
        out[s] = StepTruth(s, float(d_all[s]), float(d_none[s]), delay, slow, causes)
    return out


def generate(spec: ClusterSpec | None = None, *, job: str = "sim-job", steps: int = 80,
             faults: list[Fault] | int | None = None, seed: int = 0, t0: float | None = None,
             job_spec: JobSpec | None = None, interval: float = 2.0, skew_s: float = 0.05,
             missing: float = 0.005, kinds: list[str] | None = None, variation: Variation | None = None,
             slow_truth: float = SLOW_TRUTH, healthy_truth: float = HEALTHY_TRUTH) -> Scenario:
    """Build one job run. `faults`: an explicit list, or a number of random ones (`kinds` to pick from).
    `variation` (#15): sampling per collector, clock skew, missing series, counter starts and noise
    as drawn there (it overrides `interval` and `skew_s`). `slow_truth`/`healthy_truth`: the share of
    the step a fault must add for the step to count as slow, and under which it counts as healthy."""
    cluster = build_cluster(spec or ClusterSpec())
    jspec = job_spec or JobSpec()
    if jspec.checkpoint_to == "shared" and cluster.shared_source is None:
        raise ConfigError("checkpoints to the shared volume need one (ClusterSpec.storage_device)")
    if variation is not None:
        interval, skew_s = 1.0, variation.skew_s  # a 1 s grid that each collector then reads every k s
        if variation.step_jitter > 0 and jspec.step_jitter == 0:
            jspec = replace(jspec, step_jitter=variation.step_jitter)
    rng = np.random.default_rng(seed)
    if faults is None or isinstance(faults, int):
        faults = random_plan(cluster, rng, n_steps=steps, n_faults=int(faults or 0), kinds=kinds,
                             ckpt_every=jspec.ckpt_every)
    noise = Noise.draw(rng, steps, cluster, jspec)
    tl = run(cluster, jspec, noise, faults)
    truth = _truth(cluster, jspec, noise, faults, tl, slow_truth, healthy_truth)
    host_skew = rng.uniform(-skew_s, skew_s, len(cluster.hosts))
    streams = build_streams(cluster, jspec, tl, faults, rng=rng, interval=interval, host_skew=host_skew,
                            missing=missing)
    # GPU and host streams (#17) from an rng of their own: a seed's network streams stay the same.
    dev, device_events = build_device_streams(cluster, jspec, tl, faults, rng=np.random.default_rng([seed, 17]),
                                              interval=interval, host_skew=host_skew, missing=missing)
    streams = concat_streams(streams, dev)
    # #15: the shared volume's streams, from an rng of their own too
    streams = concat_streams(streams, build_shared_storage_streams(
        cluster, tl, faults, rng=np.random.default_rng([seed, 15]), interval=interval, missing=missing, job=jspec))
    if variation is not None:  # its own generator too
        streams = variation.apply(streams, cluster, np.random.default_rng([seed, 1515]))
    dropped_steps = rng.random(tl.start.shape) < missing / 2
    dropped_coll = rng.random(tl.coll_start.shape) < missing / 2
    start = t0 if t0 is not None else 1.7e9 + seed * 86400.0
    return Scenario(cluster, jspec, job, start, faults, tl, streams, host_skew, truth, dropped_steps,
                    dropped_coll, device_events)


def concat_streams(a: Streams, b: Streams) -> Streams:
    """Two stream sets on the same time grid as one."""
    return Streams(a.sources + b.sources, a.metrics + b.metrics, a.labels + b.labels, a.kinds + b.kinds,
                   np.vstack([a.ts, b.ts]), np.vstack([a.values, b.values]), np.vstack([a.keep, b.keep]))
