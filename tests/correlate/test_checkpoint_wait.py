"""At a checkpoint step the ranks wait for the slowest writer, not for the phase's outlier (#15, 781
run 35 step 60): a GPU a few hundredths of a second slow in compute is many sigmas out in a quiet
job, while one host's checkpoint volume, slow in the same seconds, held every rank longer. The GPU
no rank waited for (decompose.straggler_loss: 0) is not the step's cause; the volume is, with its
write latency as the evidence. Through the real ingest API and database."""

from __future__ import annotations

import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.decompose import decompose, find_straggler, straggler_loss
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.model import JobSpec
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.correlate.scenarios import post

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
STEP = 40  # a checkpoint step (JobSpec.ckpt_every 10)


def test_a_gpu_no_rank_waited_for_at_a_checkpoint_step_is_not_its_cause(service_url: str,
                                                                        db_conn: psycopg.Connection) -> None:
    """Rule: at a checkpoint step a straggler no rank waited for is not the step's cause (engine._explain,
    decompose.straggler_loss)."""
    cluster = build_cluster(SPEC)
    slow_write = make_fault(cluster, "storage_slow", variant="ckpt", start_step=STEP - 2, steps=4, severity=0.1,
                            rng=np.random.default_rng(3))
    gpu = make_fault(cluster, "gpu_straggler", start_step=STEP, steps=1, severity=0.03, rng=np.random.default_rng(103))
    sc = post(service_url, generate(SPEC, job="checkpoint-wait", steps=56, faults=[slow_write, gpu], seed=3,
                                    t0=1.7931e9, job_spec=JobSpec(compute_noise=0.004), slow_truth=0.04,
                                    healthy_truth=0.02))
    assert sc.timeline.ckpt_steps[STEP] and sc.truth[STEP].slow
    host = slow_write.component.split(":")[0]
    assert not gpu.component.startswith(f"{host}:")  # another host's GPU
    # the phase's outlier is the GPU, many sigmas out in compute, but no rank waited for it
    per_rank = decompose(*q.rank_rows(db_conn, job=sc.job, step=STEP))
    st = find_straggler(per_rank)
    assert st is not None and st.phase == "compute" and f"{st.host}:{st.gpu}" == gpu.component, st
    assert straggler_loss(per_rank, st) == 0.0
    a = AttributionEngine().attribute_step(db_conn, job=sc.job, step=STEP, store=False)
    assert a is not None and a["slow"] and (a["layer"], a["component"]) == ("storage", slow_write.component), a
    assert any(e["source"] == slow_write.component and e["metric"] == "write_latency_seconds"
               for e in a["evidence"]), a["evidence"]
    assert not any(e["source"] == gpu.component for e in a["evidence"]), a["evidence"]
