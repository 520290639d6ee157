"""Names drawn per run (#15): realistic styles, nothing in a name tells a role apart, same seed same names."""

from __future__ import annotations

import re
from dataclasses import replace

from fabricscope.service.simulate.naming import ROLE_WORDS
from fabricscope.service.simulate.topology import Cluster, ClusterSpec, build_cluster

SPEC = ClusterSpec(hosts=8, gpus_per_host=8, nics_per_host=4, leaves=2, spines=2)
SEEDS = range(40)


def _all_names(c: Cluster) -> list[str]:
    names = c.hosts + c.leaves + c.spines + c.nics + c.switch_ports + c.volumes
    names += [c.rank_source(r) for r in range(c.ranks)]
    return names + ([c.shared_source] if c.shared_source else [])


def test_no_name_says_what_a_thing_does() -> None:
    for seed in SEEDS:
        c = build_cluster(replace(SPEC, names=seed))
        for name in _all_names(c):
            assert not any(w in name.lower() for w in ROLE_WORDS), (seed, name)
        body = c.topology_body()
        assert all("role" not in d for d in body["devices"]), seed  # tiers come from the links
        devices = [d["name"] for d in body["devices"]]
        assert len(set(devices)) == len(devices), devices
        assert len(set(c.switch_ports)) == len(c.switch_ports) and len(set(c.nics)) == len(c.nics)
        data, ckpt = c.volumes[0], c.volumes[1]
        assert data != ckpt and data.split(":", 1)[1].startswith("/") and ckpt.split(":", 1)[1].startswith("/")


def test_names_are_deterministic_per_seed_and_vary_between_seeds() -> None:
    a, b = build_cluster(replace(SPEC, names=3)), build_cluster(replace(SPEC, names=3))
    assert _all_names(a) == _all_names(b)
    shapes = {re.sub(r"[0-9a-f]", "x", build_cluster(replace(SPEC, names=s)).hosts[0]) for s in SEEDS}
    ports = {re.sub(r"\d+", "N", build_cluster(replace(SPEC, names=s)).leaf_down[0].split(":")[1]) for s in SEEDS}
    nics = {re.sub(r"\d+", "N", build_cluster(replace(SPEC, names=s)).nics[0].split(":")[1]) for s in SEEDS}
    assert len(shapes) >= 4 and len(ports) >= 4 and len(nics) >= 3, (shapes, ports, nics)


def test_leaves_and_spines_cannot_be_told_apart_by_name() -> None:
    """A generator that numbered the leaves first would let sorting names find the tiers."""
    leaves_first = 0
    for seed in SEEDS:
        c = build_cluster(replace(SPEC, names=seed))
        leaves_first += max(c.leaves) < min(c.spines)
        assert {p.split(":")[0] for p in c.leaf_down} == set(c.leaves)
        assert {p.split(":")[0] for p in c.spine_ports} == set(c.spines)
    assert leaves_first < 0.8 * len(SEEDS)


def test_classic_names_stay_without_a_names_seed() -> None:
    c = build_cluster(SPEC)
    assert c.nics[0] == "node01:mlx5_0" and c.leaf_down[0] == "leaf1:Ethernet1" and c.leaves == ["leaf1", "leaf2"]
    assert [d.get("role") for d in c.topology_body()["devices"] if d["kind"] == "switch"] == [
        "leaf", "leaf", "spine", "spine"]
