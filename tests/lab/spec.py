"""The lab's fabric as data: which namespaces exist and how they are wired (pure, no side effects).

Two leaves and one spine (Linux bridges in their own network namespaces) and four hosts, one per
leaf port. One spine on purpose: Linux bridges run no ECMP, and a second spine would close an L2
loop. Every kernel object the lab makes is named from ``prefix`` (namespaces ``<prefix>-leaf1``,
cgroups ``<prefix>/host1``, files under ``/run/<prefix>``), so nothing outside the lab is touched.
Interface names (``swp1``, ``eth0``) live only inside the lab's namespaces.

A storage system outside the fabric (``storage``) serves one shared dataset volume
(``dataset_volume``) that every host's ranks read their data shard from; it is declared as a
``storage`` device with that volume, so its samples come under ``<storage>:<dataset_volume>``.
The names are neutral on purpose: nothing in them says "dataset" (the engine must not need it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PREFIX = "fslab"
SUBNET = "10.77.0"  # hosts are 10.77.0.<n>/24, inside their namespaces only


@dataclass(frozen=True)
class Wire:
    """One veth cable: (device, interface) at each end. ``a`` is the lower tier (host or leaf)."""

    a_dev: str
    a_if: str
    b_dev: str
    b_if: str

    @property
    def a(self) -> str:
        return f"{self.a_dev}:{self.a_if}"

    @property
    def b(self) -> str:
        return f"{self.b_dev}:{self.b_if}"


@dataclass(frozen=True)
class LabSpec:
    prefix: str = DEFAULT_PREFIX
    hosts: tuple[str, ...] = ("host1", "host2", "host3", "host4")
    leaves: tuple[str, ...] = ("leaf1", "leaf2")
    spines: tuple[str, ...] = ("spine1",)
    wires: tuple[Wire, ...] = field(default=())
    storage: str = "nas1"  # the storage system serving the shared dataset volume
    dataset_volume: str = "share0"  # its volume every host reads its shard from

    @classmethod
    def default(cls, prefix: str = DEFAULT_PREFIX) -> LabSpec:
        w = [Wire("host1", "eth0", "leaf1", "swp1"), Wire("host2", "eth0", "leaf1", "swp2"),
             Wire("host3", "eth0", "leaf2", "swp1"), Wire("host4", "eth0", "leaf2", "swp2"),
             Wire("leaf1", "swp3", "spine1", "swp1"), Wire("leaf2", "swp3", "spine1", "swp2")]
        if not prefix.replace("-", "").isalnum() or len(prefix) > 12:
            raise ValueError(f"lab prefix {prefix!r}: letters, digits and '-', at most 12 characters")
        return cls(prefix=prefix, wires=tuple(w))

    @property
    def switches(self) -> tuple[str, ...]:
        return self.leaves + self.spines

    def ns(self, device: str) -> str:
        return f"{self.prefix}-{device}"

    @property
    def namespaces(self) -> list[str]:
        return [self.ns(d) for d in self.switches + self.hosts]

    @property
    def run_dir(self) -> Path:
        return Path("/run") / self.prefix

    def ip(self, host: str) -> str:
        return f"{SUBNET}.{self.hosts.index(host) + 1}"

    def ports(self, switch: str) -> list[str]:
        out = [w.b_if for w in self.wires if w.b_dev == switch] + [w.a_if for w in self.wires if w.a_dev == switch]
        return sorted(out)

    def port_of(self, host: str) -> str:
        """The leaf port (``leaf1:swp2``) a host's eth0 plugs into."""
        return next(w.b for w in self.wires if w.a_dev == host)

    @property
    def dataset_source(self) -> str:
        """The shared dataset volume's source, as the topology names it (``nas1:share0``)."""
        return f"{self.storage}:{self.dataset_volume}"

    def topology_body(self) -> dict[str, object]:
        """PUT /v1/topology from the wiring this lab itself created, and its storage system."""
        devices: list[dict[str, object]] = [{"name": s, "kind": "switch"} for s in self.switches]
        devices += [{"name": h, "kind": "host"} for h in self.hosts]
        devices.append({"name": self.storage, "kind": "storage", "volumes": [self.dataset_volume]})
        return {"devices": devices, "links": [{"a": w.a, "b": w.b, "speed_bps": 10e9} for w in self.wires]}
