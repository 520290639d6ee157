"""A cluster of another shape than the bench's old 64-rank one (#15: the evaluation brings its own
topologies): 4 hosts of 8 GPUs with a NIC per GPU, two leaves under one spine. The spine's two
leaf-facing ports are a peer group of two, whose MAD was each one's own deviation: the uplink taking
errors never stood out, and its fault's steps were `unknown` (stop 39, 787 run 1). Step 0 compiles,
2.5 times the others, and stays out of the healthy steps the bar is measured on. Through the real
ingest API and database."""

from __future__ import annotations

import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.case import _baselines_for
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.correlate.scenarios import post, stored_summaries

SPEC = ClusterSpec(hosts=4, gpus_per_host=8, nics_per_host=8, leaves=2, spines=1)
START, STEPS = 24, 8


def test_an_uplink_of_a_one_spine_cluster_is_named_on_its_errors(service_url: str,
                                                                   db_conn: psycopg.Connection) -> None:
    cluster = build_cluster(SPEC)
    fault = make_fault(cluster, "link_errors", variant="uplink", start_step=START, steps=STEPS, severity=0.1,
                       rng=np.random.default_rng(11))
    assert fault.component in cluster.leaf_up and len(cluster.spine_ports) == 2
    sc = post(service_url, generate(SPEC, job="shape-uplink", steps=44, faults=[fault], seed=11, t0=1.7932e9,
                                    slow_truth=0.04, healthy_truth=0.02))
    # step 0 compiles; once the bootstrap has its steps it leaves them, and the bar is the job's own
    summ = stored_summaries(db_conn, sc.job, START - 1)
    assert summ["step"].iloc[0] == 0 and summ["dur"].iloc[0] > 2 * summ["dur"].iloc[1:].median()
    with_warmup, without = _baselines_for(summ), _baselines_for(summ.iloc[1:].reset_index(drop=True))
    np.testing.assert_array_equal(with_warmup.sigma[6:], without.sigma[5:])
    engine = AttributionEngine()
    faulty = [s for s in range(START, START + STEPS) if sc.truth[s].slow]
    assert len(faulty) >= STEPS - 2
    for s in faulty:
        a = engine.attribute_step(db_conn, job=sc.job, step=s, store=False)
        assert a is not None and a["slow"] and (a["layer"], a["component"]) == ("link", fault.component), (s, a)
    healthy = [s for s in range(8, 44) if sc.truth[s].slow is False]
    assert not any(engine.attribute_step(db_conn, job=sc.job, step=s, store=False)["slow"] for s in healthy)
