"""A leaf–spine cluster as plain arrays of names: hosts, NICs, switch ports, volumes and links.

Every GPU maps to one NIC of its host; every NIC has one link to a leaf port (hosts are spread
over the leaves in contiguous blocks); every leaf has one uplink to every spine. The names are
the ones collectors produce (`node07:mlx5_2`, `leaf1:Ethernet12`, `spine2:Ethernet1`,
`node07:/mnt/ckpt`), so the engine sees exactly what a real deployment would send it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fabricscope.service.simulate.naming import Names, draw_names, mount_names, storage_names

DATA_VOLUME = "/mnt/data"  # the data loader reads from it every step
CKPT_VOLUME = "/mnt/ckpt"  # checkpoints are written to it


@dataclass(frozen=True)
class ClusterSpec:
    hosts: int = 8
    gpus_per_host: int = 8
    nics_per_host: int = 8
    leaves: int = 2
    spines: int = 2
    link_speed_bps: float = 400e9
    uplink_speed_bps: float = 800e9
    # -- fabric flavour (#16): RoCE (PFC pause, ECN, egress queues per traffic class) or InfiniBand
    # (credits: port_xmit_wait, no pause or ECN; NICs are HCAs), and how its ports and queues are named.
    fabric: str = "roce"  # roce | ib
    lossless_priority: int = 3  # the RoCE traffic class: its queue and PFC priority
    lossy_queue: int = 0  # the queue of everything else (TCP, storage)
    port_prefix: str = "Ethernet"  # Ethernet12, swp12, Eth1/12, p12
    # -- storage (#15): the hosts' local mounts (the same path on every host), and a shared volume
    # (an NFS/Lustre/object gateway) every host's data loader reads: `storage_device` declared in the
    # topology as kind storage with `volumes`, its series' source `storage_device:shared_volume`.
    # Empty storage_device: no shared volume. random_storage_names() draws names that say nothing.
    data_mount: str = DATA_VOLUME
    ckpt_mount: str = CKPT_VOLUME
    storage_device: str = "store1"
    shared_volume: str = "vol0"
    # #15: draw every name (hosts, switches, ports, NICs, GPUs, mounts, the storage system and its
    # volume) from naming.py's styles with this seed; None: the classic names above.
    names: int | None = None

    def __post_init__(self) -> None:
        if self.fabric not in ("roce", "ib"):
            raise ValueError("fabric must be roce or ib")
        if self.lossless_priority == self.lossy_queue or not 0 <= self.lossless_priority <= 7:
            raise ValueError("lossless_priority must be 0-7 and differ from lossy_queue")
        for name in ("hosts", "gpus_per_host", "nics_per_host", "leaves", "spines"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.nics_per_host > self.gpus_per_host:
            raise ValueError("nics_per_host must be <= gpus_per_host (each NIC serves at least one GPU)")
        if self.leaves > self.hosts:
            raise ValueError("leaves must be <= hosts")


@dataclass
class Cluster:
    spec: ClusterSpec
    hosts: list[str]
    nics: list[str]  # host:mlx5_i, host-major
    nic_host: list[int]  # index into hosts
    leaf_down: list[str]  # leaf port facing nics[i], aligned with nics
    leaf_up: list[str]  # leafL:EthernetP toward spine S, (leaf, spine) major
    spine_ports: list[str]  # spineS:EthernetL, aligned with leaf_up
    volumes: list[str]  # host:<data mount>, host:<checkpoint mount>, host-major
    rank_host: list[int]
    rank_gpu: list[str]
    rank_nic: list[int]  # index into nics
    host_leaf: list[int] = field(default_factory=list)
    leaves: list[str] = field(default_factory=list)  # switch names
    spines: list[str] = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return len(self.rank_host)

    @property
    def switch_ports(self) -> list[str]:
        return self.leaf_down + self.leaf_up + self.spine_ports

    def rank_source(self, rank: int) -> str:
        return f"{self.hosts[self.rank_host[rank]]}:{self.rank_gpu[rank]}"

    @property
    def shared_source(self) -> str | None:
        """The shared volume's source (`device:volume`), None without one (#15)."""
        sp = self.spec
        return f"{sp.storage_device}:{sp.shared_volume}" if sp.storage_device else None

    def topology_body(self) -> dict[str, Any]:
        """The `PUT /v1/topology` body."""
        devices: list[dict[str, Any]] = [{"name": h, "kind": "host"} for h in self.hosts]
        if self.spec.storage_device:  # #15: the shared storage system and the volume it serves
            devices.append({"name": self.spec.storage_device, "kind": "storage",
                            "volumes": [self.spec.shared_volume]})
        if self.spec.names is None:
            devices += [{"name": s, "kind": "switch", "role": "leaf"} for s in self.leaves]
            devices += [{"name": s, "kind": "switch", "role": "spine"} for s in self.spines]
        else:  # #15: drawn names declare no role either: tiers come from the links
            devices += [{"name": s, "kind": "switch"} for s in self.leaves + self.spines]
        links = [{"a": n, "b": p, "speed_bps": self.spec.link_speed_bps}
                 for n, p in zip(self.nics, self.leaf_down, strict=True)]
        links += [{"a": u, "b": s, "speed_bps": self.spec.uplink_speed_bps}
                  for u, s in zip(self.leaf_up, self.spine_ports, strict=False)]
        return {"devices": devices, "links": links}

    def job_body(self, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """The `PUT /v1/jobs/{job}` body: rank placement."""
        ranks = [{"rank": r, "host": self.hosts[h], "gpu": self.rank_gpu[r],
                  "nic": self.nics[self.rank_nic[r]].split(":", 1)[1]}
                 for r, h in enumerate(self.rank_host)]
        return {"ranks": ranks, "labels": labels or {}}


def _classic_names(spec: ClusterSpec, n_ports: int) -> Names:
    width = max(2, len(str(spec.hosts)))
    return Names([f"node{i + 1:0{width}d}" for i in range(spec.hosts)],
                 [f"leaf{i + 1}" for i in range(spec.leaves)] + [f"spine{i + 1}" for i in range(spec.spines)],
                 [f"{spec.port_prefix}{i + 1}" for i in range(n_ports)],
                 [f"mlx5_{n}" for n in range(spec.nics_per_host)],
                 [f"gpu{g}" for g in range(spec.gpus_per_host)], (spec.data_mount, spec.ckpt_mount),
                 spec.storage_device, spec.shared_volume)


def build_cluster(spec: ClusterSpec) -> Cluster:
    host_leaf = [h * spec.leaves // spec.hosts for h in range(spec.hosts)]
    per_leaf = max(host_leaf.count(x) for x in range(spec.leaves)) * spec.nics_per_host
    n_ports = max(per_leaf + spec.spines, spec.leaves)
    if spec.names is None:
        nm = _classic_names(spec, n_ports)
    else:
        nm = draw_names(spec.names, hosts=spec.hosts, switches=spec.leaves + spec.spines, ports=n_ports,
                        nics=spec.nics_per_host, gpus=spec.gpus_per_host, fabric=spec.fabric)
        if spec.storage_device:  # the shared volume's names come with the others (empty: none)
            spec = replace(spec, storage_device=nm.storage_device, shared_volume=nm.shared_volume)
        spec = replace(spec, data_mount=nm.mounts[0], ckpt_mount=nm.mounts[1])
    hosts = nm.hosts
    leaves, spines = nm.switches[:spec.leaves], nm.switches[spec.leaves:]
    port = nm.ports
    nics: list[str] = []
    nic_host: list[int] = []
    leaf_down: list[str] = []
    next_port = [1] * spec.leaves
    for h, host in enumerate(hosts):
        leaf = host_leaf[h]
        for n in range(spec.nics_per_host):
            nics.append(f"{host}:{nm.nics[n]}")
            nic_host.append(h)
            leaf_down.append(f"{leaves[leaf]}:{port[next_port[leaf] - 1]}")
            next_port[leaf] += 1
    first_up = max(next_port) - 1  # uplinks numbered after the largest leaf's downlinks
    leaf_up = [f"{leaves[lf]}:{port[first_up + s]}" for lf in range(spec.leaves) for s in range(spec.spines)]
    spine_ports = [f"{spines[s]}:{port[lf]}" for lf in range(spec.leaves) for s in range(spec.spines)]
    volumes = [f"{h}:{v}" for h in hosts for v in (spec.data_mount, spec.ckpt_mount)]
    rank_host, rank_gpu, rank_nic = [], [], []
    for h in range(spec.hosts):
        for g in range(spec.gpus_per_host):
            rank_host.append(h)
            rank_gpu.append(nm.gpus[g])
            rank_nic.append(h * spec.nics_per_host + g * spec.nics_per_host // spec.gpus_per_host)
    return Cluster(spec, hosts, nics, nic_host, leaf_down, leaf_up, spine_ports, volumes,
                   rank_host, rank_gpu, rank_nic, host_leaf, leaves, spines)


# -- storage names (#15) ----------------------------------------------------------------------------

def random_storage_names(rng: Any) -> dict[str, str]:
    """ClusterSpec fields (for dataclasses.replace) naming the local mounts and the shared volume from
    naming.py's pools: nothing in a name says data, checkpoint or shared (`rng`: numpy Generator).
    `ClusterSpec.names` draws these and every other name."""
    a, b = mount_names(rng, 2)
    device, volume = storage_names(rng)
    return {"data_mount": a, "ckpt_mount": b, "storage_device": device, "shared_volume": volume}
