"""A volume's read latency floor follows its level (localize.LEVEL_FLOORS, window.level_floor). FLOORS'
2 ms is five times a local NVMe volume's whole read latency: against its peers such a volume that got
four-fold slower (0.8 -> 3.2 ms) scored a peer z of 1.2 and was no evidence, and the slow data loads
on its host were named after the host. Against its peers' level (15 % of their median, at most the
2 ms, never under 0.1 ms) it stands out; a disk array's few-ms wobble still does not, nor do the
hosts still writing a checkpoint (write latency keeps the absolute floor)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate import window as win
from fabricscope.service.correlate.localize import FLOORS, LEVEL_FLOORS, Topo, series_groups
from fabricscope.service.correlate.queries import scoring_arrays
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster, random_storage_names
from tests.correlate.scenarios import post

METRIC = "read_latency_seconds"
_slot = itertools.count()
ENGINE = AttributionEngine()


def _group(values: list[float], rel: float, solo: bool = False) -> tuple[win.Scoring, np.ndarray]:
    n = len(values)
    sc = win.Scoring(ids=np.arange(n, dtype=np.int64), grp=np.zeros(n, np.int64), gauge=np.ones(n, bool),
                     floor=np.full(n, FLOORS[METRIC]), net=np.zeros(n, bool), solo=np.full(n, solo), lit={},
                     floor_rel=np.full(n, rel))
    return sc, np.array(values, float)


def _z_of_last(values: list[float], rel: float) -> float:
    sc, cur = _group(values, rel)
    out, _ = win.peer_scores(sc, np.arange(len(values)), cur, cur, min_z=-np.inf, limit=len(values))
    return float(out.loc[out["series_id"] == len(values) - 1, "peer_z"].iloc[0])


NVME = [0.00078, 0.00081, 0.00080, 0.00079, 0.00082, 0.00080, 0.00077]


def test_a_fast_volume_four_times_slower_stands_out_from_its_peers_only_against_their_level() -> None:
    rel = LEVEL_FLOORS[METRIC]
    assert _z_of_last([*NVME, 0.0032], rel) >= 3.0 * 5  # 2.4 ms over a floor of 0.12 ms
    assert _z_of_last([*NVME, 0.0032], 0.0) < 3.0  # the absolute 2 ms: no evidence
    assert _z_of_last([*NVME, 0.00086], rel) < 3.0  # +7 %: a gauge's wobble


def test_a_disk_arrays_few_ms_wobble_keeps_the_absolute_floor() -> None:
    """At a 20-ms level 15 % is 3 ms, more than FLOORS: the floor stays 2 ms, as before."""
    arrays = [0.0200, 0.0195, 0.0203, 0.0199, 0.0201, 0.0198, 0.0202]
    rel = LEVEL_FLOORS[METRIC]
    assert _z_of_last([*arrays, 0.0240], rel) == _z_of_last([*arrays, 0.0240], 0.0) < 3.0


def test_the_floor_is_never_under_a_share_of_the_absolute_one_and_a_solo_series_keeps_its_own() -> None:
    floor = np.full(3, FLOORS[METRIC])
    got = win.level_floor(floor, np.array([0.15, 0.15, 0.0]), np.array([1e-6, 0.0008, 0.0008]))
    assert np.allclose(got, [0.05 * FLOORS[METRIC], 0.15 * 0.0008, FLOORS[METRIC]])
    # a volume without peers (a storage system's) is scored on its own history (localize.finish_scores)
    sc, cur = _group([0.0032], LEVEL_FLOORS[METRIC], solo=True)
    out, _ = win.peer_scores(sc, np.arange(1), cur, cur, min_z=3.0, limit=4)
    assert out["window_floor"].tolist() == [FLOORS[METRIC]] and np.isnan(out["peer_z"].iloc[0])


def test_hosts_still_writing_a_checkpoint_do_not_stand_out_from_those_done() -> None:
    """Write latency of 8 hosts' local volume: 2 still writing (3-4 ms), 6 back at 0.5 ms. Read
    latency at the same levels would stand out; the write keeps FLOORS' 2 ms, as a checkpoint's
    writes end host by host every checkpoint."""
    hosts = [f"h{k}" for k in range(8)]
    level = np.array([0.0035, 0.0031, 0.00050, 0.00052, 0.00049, 0.00051, 0.00050, 0.00048])
    for metric, stands_out in (("write_latency_seconds", False), (METRIC, True)):
        meta = pd.DataFrame({"series_id": np.arange(8), "source": [f"{h}:/data" for h in hosts], "metric": metric,
                             "kind": "gauge", "labels": "{}"})
        topo = Topo(role={**{f"{h}:/data": "volume" for h in hosts}, **{h: "host" for h in hosts}}, peer={},
                    host_of={f"{h}:/data": h for h in hosts})
        sc = scoring_arrays(series_groups(meta, topo))
        out, _ = win.peer_scores(sc, np.arange(8), level, level, min_z=3.0, limit=8)
        assert sorted(out["series_id"].tolist()) == ([0, 1] if stands_out else []), (metric, out)


def _fast_volume(sc: Scenario, volume: str, most: float) -> None:
    """The volume's read latency rose `most`-fold at most (the simulator makes a slow read 10-20-fold):
    its excess over its usual level scaled down alike everywhere."""
    st = sc.streams
    i = next(k for k, (s, m) in enumerate(zip(st.sources, st.metrics, strict=True)) if s == volume and m == METRIC)
    base = float(np.median(st.values[i]))
    excess = st.values[i] - base
    st.values[i] = base + excess * (most - 1.0) * base / max(float(excess.max()), 1e-12)


def test_a_local_data_volume_four_times_slower_is_named_not_its_host(service_url: str,
                                                                     db_conn: psycopg.Connection) -> None:
    """Rule: a read latency's floor follows its peers' level (localize.LEVEL_FLOORS, window.level_floor)."""
    spec = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2,
                       **random_storage_names(np.random.default_rng(35)))
    f = make_fault(build_cluster(spec), "storage_slow", start_step=20, steps=5, severity=0.12, variant="data",
                   rng=np.random.default_rng(3))
    sc = generate(spec, job=f"level-floor-{next(_slot)}", steps=32, faults=[f], seed=35,
                  t0=1.77e9 + next(_slot) * 5000.0)
    _fast_volume(sc, f.component, 4.0)
    post(service_url, sc)
    slow = [t.step for t in sc.truth.values() if t.slow]
    assert len(slow) >= 3
    for s in slow:
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=s, store=False)
        assert a is not None and a["slow"] and (a["layer"], a["component"]) == ("storage", f.component), (s, a)
        lat = [e for e in a["evidence"] if e["source"] == f.component and e["metric"] == METRIC]
        assert lat and lat[0]["value"] < 4.5 * lat[0]["baseline"], a["evidence"]
