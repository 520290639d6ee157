"""The simulator's shared volume (#15): what the engine is given to work with."""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricscope.service.simulate.faults import make_fault, random_plan
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster, random_storage_names

SPEC = dataclasses.replace(ClusterSpec(hosts=4, gpus_per_host=2, nics_per_host=1),
                           **random_storage_names(np.random.default_rng(4)))


def test_a_slow_shared_volume_slows_every_rank_alike_and_only_its_latency_rises() -> None:
    c = build_cluster(SPEC)
    f = make_fault(c, "shared_volume_slow", start_step=12, steps=4, severity=0.2, rng=np.random.default_rng(0))
    sc = generate(SPEC, job="j", steps=24, faults=[f], seed=2)
    data = sc.timeline.data
    grow = data[13] - data[8]
    assert grow.min() > 0.15 and grow.max() - grow.min() < 0.05  # every rank, by the same amount
    assert all(sc.truth[s].component == f.component for s in range(12, 16) if sc.truth[s].slow)
    st = sc.streams
    ix = {m: i for i, (s, m) in enumerate(zip(st.sources, st.metrics, strict=True)) if s == f.component}
    assert set(ix) == {"read_bytes_total", "read_ops_total", "read_latency_seconds"}
    t0, t1 = float(sc.timeline.start[12].min()), float(sc.timeline.end[15].max())
    on = (st.ts[ix["read_latency_seconds"]] > t0 + 2) & (st.ts[ix["read_latency_seconds"]] < t1 - 2)
    before = (st.ts[ix["read_latency_seconds"]] > 0) & (st.ts[ix["read_latency_seconds"]] < t0 - 2)
    lat = st.values[ix["read_latency_seconds"]]
    assert np.median(lat[on]) > 1.8 * np.median(lat[before])  # several-fold
    ops = np.diff(st.values[ix["read_ops_total"]]) / np.diff(st.ts[ix["read_ops_total"]])
    assert 0.7 < np.median(ops[on[1:]]) / np.median(ops[before[1:]]) < 1.3  # the loaders still read


def test_names_say_nothing_and_the_topology_declares_the_volume() -> None:
    c = build_cluster(SPEC)
    assert not any(w in v for v in c.volumes for w in ("data", "ckpt", "checkpoint", "mnt"))
    assert {"name": SPEC.storage_device, "kind": "storage", "volumes": [SPEC.shared_volume]} in \
        c.topology_body()["devices"]
    kinds = {f.kind for f in random_plan(c, np.random.default_rng(1), n_steps=400, n_faults=40)}
    assert "shared_volume_slow" in kinds
    none = build_cluster(dataclasses.replace(SPEC, storage_device=""))
    assert "shared_volume_slow" not in {f.kind for f in random_plan(none, np.random.default_rng(1), n_steps=400,
                                                                      n_faults=40)}
