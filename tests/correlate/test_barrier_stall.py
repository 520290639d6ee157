"""A network stall at a checkpoint step's barrier (#15; the lab's link flap in CI, stop 42): the
barrier is not in the collectives' transfer time, so the stall reads as local work that no rank
straggled on. The loaders ran a little slow in the same step, many of their own sigmas but a sliver
of the loss: the step's cause is the flapping link, not the shared volume named from the loaders'
timing alone. Through the real ingest API and database."""

from __future__ import annotations

import dataclasses

import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.model import JobSpec
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster, random_storage_names
from tests.correlate.scenarios import longer_barrier, post, stored_baselines

SPEC = dataclasses.replace(ClusterSpec(hosts=4, gpus_per_host=2, nics_per_host=1, leaves=2, spines=2),
                           **random_storage_names(np.random.default_rng(11)))
STEP = 40  # a checkpoint step (JobSpec.ckpt_every 10)


def test_a_stall_at_the_checkpoint_barrier_is_the_links_not_the_loaders(service_url: str,
                                                                       db_conn: psycopg.Connection) -> None:
    """Rule: at a checkpoint step the loaders' timing is weighed against the step's excess beyond a plain step and
    its slowest write (baseline.compute_baselines: data_timing)."""
    cluster = build_cluster(SPEC)
    # the link's flaps and errors in the step's seconds; its own delay of the all-reduces a sliver
    flap = make_fault(cluster, "link_flap", variant="host_link", start_step=STEP, steps=1, severity=0.002,
                      rng=np.random.default_rng(5))
    sc = generate(SPEC, job="barrier-stall", steps=56, faults=[flap], seed=8, t0=1.7932e9,
                  job_spec=JobSpec(compute_noise=0.004))
    assert sc.timeline.ckpt_steps[STEP]
    data = np.median(sc.timeline.data[:STEP], axis=1)
    # 2 s at the barrier; the loaders 5 % of the step slower, ~40 of their sigmas
    hiccup = 0.05 * float(np.median(sc.timeline.step_duration()[:STEP]))
    longer_barrier(sc.timeline, STEP, 2.0, data_s=hiccup)
    assert hiccup > 20 * float(np.std(data[10:STEP]))
    post(service_url, sc)
    bl, steps = stored_baselines(db_conn, sc.job, STEP + 8)
    i = int(np.flatnonzero(steps == STEP)[0])
    assert bl.slow[i] and not bl.data_timing[i]
    a = AttributionEngine().attribute_step(db_conn, job=sc.job, step=STEP, store=False)
    assert a is not None and a["slow"]
    assert (a["layer"], a["component"]) == ("link", flap.component), a
    assert not any(c["layer"] == "storage" for c in a["causes"]), a["causes"]
