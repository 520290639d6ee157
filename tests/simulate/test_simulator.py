"""The simulator's output: docs/API.md payload shapes, topology consistency, counters, ground truth."""

from __future__ import annotations

import numpy as np
import pytest

from fabricscope.service.simulate.faults import FAULT_KINDS, make_fault, random_plan
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster

SMALL = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)


def test_topology_names_and_links() -> None:
    c = build_cluster(SMALL)
    assert c.ranks == 16 and len(c.nics) == 8
    assert c.nics[0] == "node01:mlx5_0" and c.leaf_down[0] == "leaf1:Ethernet1"
    assert c.leaf_down[-1].startswith("leaf2:")  # hosts spread over the leaves
    body = c.topology_body()
    ends = [(x["a"], x["b"]) for x in body["links"]]
    assert ("node01:mlx5_0", "leaf1:Ethernet1") in ends
    assert len(ends) == len(c.nics) + SMALL.leaves * SMALL.spines
    ranks = c.job_body()["ranks"]
    assert ranks[3] == {"rank": 3, "host": "node01", "gpu": "gpu3", "nic": "mlx5_1"}  # GPU 3 -> NIC 1


def test_invalid_spec() -> None:
    with pytest.raises(ValueError, match="nics_per_host"):
        ClusterSpec(hosts=2, gpus_per_host=2, nics_per_host=4)


def test_payloads_match_api_and_counters_are_cumulative() -> None:
    sc = generate(SMALL, job="j", steps=20, faults=0, seed=3)
    steps = sc.steps_payload()
    assert {"rank", "step", "start", "end", "phases"} <= set(steps[0])
    assert all(s["end"] > s["start"] for s in steps)
    coll = sc.collectives_payload()
    assert {"rank", "step", "seq", "op", "bytes", "start", "end", "group", "group_size"} <= set(coll[0])
    batches = list(sc.sample_batches(1000))
    assert all(len(b) <= 1000 for b in batches)
    flat = [x for b in batches for x in b]
    assert len(flat) == sc.n_samples
    pause = [x for x in flat if x["metric"] == "tx_pause_frames_total"]
    assert pause and pause[0]["labels"] == {"priority": "3"}
    st = sc.streams
    counter = np.array([k == "counter" for k in st.kinds])
    assert (np.diff(st.values[counter], axis=1) >= 0).all()  # cumulative, never backwards
    assert all(m.endswith("_total") for m, k in zip(st.metrics, st.kinds, strict=False) if k == "counter")
    # some samples are missing, as in life
    assert 0 < (~st.keep).sum() < 0.02 * st.keep.size


def test_ground_truth_per_fault_kind() -> None:
    c = build_cluster(SMALL)
    rng = np.random.default_rng(0)
    for kind in FAULT_KINDS:
        f = make_fault(c, kind, start_step=10, steps=2 if kind != "storage_slow" else 11, severity=0.3,
                       variant="ckpt" if kind == "storage_slow" else "", rng=rng)
        sc = generate(SMALL, job="j", steps=24, faults=[f], seed=1)
        slow = [t for t in sc.truth.values() if t.slow]
        assert slow, kind
        assert all(t.layer == f.layer and t.component == f.component for t in slow)
        assert all(f.active(t.step) for t in slow)
        assert not any(t.slow for t in sc.truth.values() if not f.active(t.step))


def test_seed_is_deterministic() -> None:
    a = generate(SMALL, job="j", steps=15, faults=2, seed=9)
    b = generate(SMALL, job="j", steps=15, faults=2, seed=9)
    assert a.faults == b.faults
    assert np.array_equal(a.streams.values, b.streams.values)


def test_a_one_leaf_cluster_gets_no_fault_on_a_link_its_job_never_crosses() -> None:
    one = build_cluster(ClusterSpec(hosts=6, gpus_per_host=4, nics_per_host=2, leaves=1, spines=2))
    two = build_cluster(ClusterSpec(hosts=6, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2))
    kinds = ["link_errors", "link_flap", "fabric_congestion"]
    seen: dict[str, set[str]] = {"one": set(), "two": set()}
    for seed in range(12):
        for name, cl in (("one", one), ("two", two)):
            plan = random_plan(cl, np.random.default_rng(seed), n_steps=80, n_faults=6, kinds=kinds)
            assert plan
            seen[name] |= {f.component for f in plan}
    assert not seen["one"] & set(one.leaf_up + one.spine_ports)
    assert seen["one"] <= set(one.leaf_down)
    assert seen["two"] & set(two.leaf_up + two.spine_ports)  # with two leaves the uplinks are drawn
