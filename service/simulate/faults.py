"""Fault kinds (a table: what each breaks and how the engine should name it) and random fault plans.

`severity` is the step time a fault adds when alone, as a fraction of the fault-free step time
(0.1 = about 10% slower); the timing model converts it into its own knobs. The recorded ground
truth per step comes from re-running the model with and without each fault (see model.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fabricscope.core.errors import ConfigError
from fabricscope.service.simulate.topology import Cluster

# kind -> (layer, variants). The component naming rule per kind is in `make_fault`.
FAULT_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpu_straggler": ("compute", ("",)),
    "host_contention": ("host", ("",)),
    "nic_degradation": ("nic", ("",)),
    "link_errors": ("link", ("host_link", "uplink")),
    "link_flap": ("link", ("host_link", "uplink")),
    "fabric_congestion": ("fabric", ("leaf_down_pfc", "leaf_down_ecn", "leaf_up_ecn", "spine_pfc")),
    "storage_slow": ("storage", ("ckpt", "data")),
    # -- egress queues and InfiniBand (#16): an incast on one leaf downlink's queue (lossless: PFC pause
    # spreads upstream; lossy: drops), credit congestion on one port of an InfiniBand fabric.
    "queue_incast": ("fabric", ("lossless", "lossy")),
    "ib_congestion": ("fabric", ("leaf_down", "leaf_up", "spine")),
    # GPU and host faults (#17); their telemetry is in devices.py.
    "gpu_thermal_throttle": ("compute", ("sw_thermal", "hw_slowdown")),  # variant: the throttle reason
    "pcie_downtrain": ("compute", ("width", "gen")),
    "gpu_xid": ("compute", ("",)),
    "cpu_starved_loader": ("host", ("",)),
    "tcp_retransmits": ("nic", ("",)),  # a socket transport (gloo, NCCL over sockets): no RDMA counter moves
    # #15: the shared volume every host's loader reads gets slow: every rank's data phase grows alike
    "shared_volume_slow": ("storage", ("",)),
}
# #44: variants made only when asked for (make_fault's `variant`), never drawn by random_plan, so a
# seed's random plan stays what it was. storage_slow "ckpt_latency": a host's own checkpoint volume
# whose write latency rises as much as its writes take longer (a latency-bound write; "ckpt" marks the
# latency at a fixed, sharper scale); "shared_ckpt": the shared volume the job writes its checkpoints
# to (JobSpec.checkpoint_to "shared") gets slow, every host's write with it.
CKPT_LATENCY = "ckpt_latency"
SHARED_CKPT = "shared_ckpt"
EXTRA_VARIANTS: dict[str, tuple[str, ...]] = {"storage_slow": (CKPT_LATENCY, SHARED_CKPT)}
# Kinds that exist on one fabric flavour only (ClusterSpec.fabric); the others happen on both.
FABRIC_ONLY: dict[str, tuple[str, ...]] = {
    "nic_degradation": ("roce",),  # a NIC out of buffer sends pause: RoCE's signature
    "fabric_congestion": ("roce",),
    "queue_incast": ("roce",),
    "ib_congestion": ("ib",),
}


def kinds_for(fabric: str, kinds: list[str], shared_volume: bool = True) -> list[str]:
    """The kinds of `kinds` that can happen on a `fabric` (roce | ib) cluster (with or without a
    shared volume, #15)."""
    return [k for k in kinds if fabric in FABRIC_ONLY.get(k, (fabric,))
            and (shared_volume or k != "shared_volume_slow")]
# A legitimate change of the job's step time (new training phase): not a fault, the baseline adapts.
LEVEL_CHANGE = "level_change"


@dataclass(frozen=True)
class Fault:
    kind: str
    layer: str
    component: str
    start_step: int
    steps: int
    severity: float
    variant: str = ""
    target: int = 0  # index into the cluster list the kind acts on (rank, host, nic, port, volume)
    # #15: a fault may begin and end inside a step: the share of its first step that had passed when
    # it began, and the share of its last step it still covered. Timings scale with the covered share.
    onset: float = 0.0
    until: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.onset < 1.0 and 0.0 < self.until <= 1.0):
            raise ValueError("onset must be in [0, 1) and until in (0, 1]")
        if self.steps == 1 and self.until <= self.onset:
            raise ValueError("a one-step fault must end after it begins (until > onset)")

    def active(self, step: int) -> bool:
        return self.start_step <= step < self.start_step + self.steps

    def cover(self, step: int) -> float:
        """Share of `step` the fault was active in (0 when not at all)."""
        if not self.active(step):
            return 0.0
        lo = self.onset if step == self.start_step else 0.0
        hi = self.until if step == self.start_step + self.steps - 1 else 1.0
        return hi - lo

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fault_window(f: Fault, step_start: np.ndarray, step_end: np.ndarray) -> tuple[float, float]:
    """The true-clock span a fault was active in: from `onset` into its first step to `until` into
    its last (`step_start`/`step_end`: per step, earliest start and latest end over the ranks)."""
    first, last = f.start_step, min(f.start_step + f.steps, len(step_start)) - 1
    a = float(step_start[first]) + f.onset * float(step_end[first] - step_start[first])
    z = float(step_start[last]) + f.until * float(step_end[last] - step_start[last])
    return a, z


_INTER_LEAF = ("uplink", "leaf_up", "spine")  # variants on a leaf-spine link or a spine


def fault_variants(cluster: Cluster, kind: str) -> tuple[str, ...]:
    """The variants of `kind` that can slow a job on `cluster`: with one leaf the job's traffic never
    leaves it, and a leaf-spine link or a spine port it does not cross cannot."""
    variants = FAULT_KINDS[kind][1]
    if cluster.spec.leaves == 1:
        variants = tuple(v for v in variants if not v.startswith(_INTER_LEAF))
    return variants


def make_fault(cluster: Cluster, kind: str, *, start_step: int, steps: int, severity: float,
               variant: str = "", rng: np.random.Generator, onset: float = 0.0, until: float = 1.0) -> Fault:
    """A fault of `kind` on a random target of the cluster, with the component the engine must name."""
    if kind == LEVEL_CHANGE:
        return Fault(kind, "none", "", start_step, steps, severity)
    layer = FAULT_KINDS[kind][0]
    variant = variant or str(rng.choice(fault_variants(cluster, kind)))
    if kind == "gpu_straggler":
        target = int(rng.integers(cluster.ranks))
        component = cluster.rank_source(target)
    elif kind == "host_contention":
        target = int(rng.integers(len(cluster.hosts)))
        component = cluster.hosts[target]
    elif kind == "nic_degradation":
        target = int(rng.integers(len(cluster.nics)))
        component = cluster.nics[target]
    elif kind in ("link_errors", "link_flap"):
        # A link is named by its lower-tier switch port: the leaf port of a host link, the leaf
        # side of a leaf–spine link.
        if variant == "host_link":
            target = int(rng.integers(len(cluster.nics)))
            component = cluster.leaf_down[target]
        else:
            target = int(rng.integers(len(cluster.leaf_up)))
            component = cluster.leaf_up[target]
    elif kind == "fabric_congestion":
        if variant.startswith("leaf_down"):
            target = int(rng.integers(len(cluster.leaf_down)))
            component = cluster.leaf_down[target]
        elif variant.startswith("leaf_up"):
            target = int(rng.integers(len(cluster.leaf_up)))
            component = cluster.leaf_up[target]
        else:
            target = int(rng.integers(len(cluster.spine_ports)))
            component = cluster.spine_ports[target]
    elif kind == "queue_incast":  # the egress queue toward one receiver NIC
        target = int(rng.integers(len(cluster.leaf_down)))
        component = cluster.leaf_down[target]
    elif kind == "ib_congestion":
        ports = {"leaf_down": cluster.leaf_down, "leaf_up": cluster.leaf_up, "spine": cluster.spine_ports}[variant]
        target = cluster.switch_ports.index(ports[int(rng.integers(len(ports)))])
        component = cluster.switch_ports[target]
    elif kind == "storage_slow" and variant == SHARED_CKPT:
        if cluster.shared_source is None:
            raise ConfigError("a shared_ckpt fault needs a cluster with a shared volume (ClusterSpec.storage_device)")
        target, component = 0, cluster.shared_source
    elif kind == "storage_slow":
        host = int(rng.integers(len(cluster.hosts)))
        target = 2 * host + (1 if variant in ("ckpt", CKPT_LATENCY) else 0)
        component = cluster.volumes[target]  # #15: mount paths are random, they say nothing
    elif kind == "shared_volume_slow":
        if cluster.shared_source is None:
            raise ValueError("shared_volume_slow needs a cluster with a shared volume (ClusterSpec.storage_device)")
        target, component = 0, cluster.shared_source
    elif kind in ("gpu_thermal_throttle", "pcie_downtrain", "gpu_xid"):
        target = int(rng.integers(cluster.ranks))
        component = cluster.rank_source(target)
    elif kind == "cpu_starved_loader":
        target = int(rng.integers(len(cluster.hosts)))
        component = cluster.hosts[target]
    elif kind == "tcp_retransmits":
        # TCP counters are per host: the NIC is named when the job's ranks on the host use one NIC,
        # the host otherwise (which NIC carried the lost segments is not in the host's counters).
        target = int(rng.integers(len(cluster.hosts)))
        used = {cluster.rank_nic[r] for r in range(cluster.ranks) if cluster.rank_host[r] == target}
        component = cluster.nics[used.pop()] if len(used) == 1 else cluster.hosts[target]
    else:
        raise ValueError(f"unknown fault kind {kind!r}; known: {sorted(FAULT_KINDS)}")
    return Fault(kind, layer, component, start_step, steps, float(severity), variant, target, onset, until)


def random_plan(cluster: Cluster, rng: np.random.Generator, *, n_steps: int, n_faults: int,
                kinds: list[str] | None = None, warmup: int = 16, gap: int = 3, ckpt_every: int = 10,
                severity: tuple[float, float] = (0.08, 0.8), max_len: int = 6,
                mid_step: float = 0.0) -> list[Fault]:
    """Non-overlapping faults of varied kind, size, start and length, with healthy gaps between.
    `mid_step`: the share of faults that begin and end inside a step (#15; not checkpoint faults,
    which act at one moment of the step)."""
    kinds = kinds_for(cluster.spec.fabric, kinds or list(FAULT_KINDS), cluster.shared_source is not None)
    if not kinds and n_faults:
        raise ValueError(f"none of the fault kinds asked for happens on a {cluster.spec.fabric} fabric")
    faults: list[Fault] = []
    step = warmup
    for i in range(n_faults):
        kind = kinds[(i + int(rng.integers(len(kinds)))) % len(kinds)]
        length = int(rng.integers(1, max_len + 1))
        start = step + int(rng.integers(0, gap + 1))
        variant = str(rng.choice(fault_variants(cluster, kind)))
        if kind == "storage_slow" and variant == "ckpt":
            # Checkpoint slowness shows only on checkpoint steps: cover the next one.
            nxt = ((start + ckpt_every - 1) // ckpt_every) * ckpt_every
            length = max(length, nxt - start + 1)
        if start + length + gap > n_steps:
            break
        sev = float(np.exp(rng.uniform(np.log(severity[0]), np.log(severity[1]))))
        onset, until = 0.0, 1.0
        if mid_step and rng.random() < mid_step and not (kind == "storage_slow" and variant == "ckpt"):
            onset, until = float(rng.uniform(0.1, 0.9)), float(rng.uniform(0.1, 0.9))
            if length == 1:
                onset, until = sorted((onset, until))
                until = max(until, onset + 0.05)
        faults.append(make_fault(cluster, kind, start_step=start, steps=length, severity=sev,
                                 variant=variant, rng=rng, onset=onset, until=min(until, 1.0)))
        step = start + length + gap
    return faults
