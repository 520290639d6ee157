"""A step inside a fault that its noise hid whole (#15, small sustained faults): a +5 % PCIe downtrain
in 1.5 % step noise leaves steps under every timing bar between its corroborated ones, one of them at
its baseline. When the step's own window shows the cause's own device state (the link's width) and
the nearest slow steps either side (up to fill_gap_steps away) name that cause, the step is slow
with it (engine._attribute), through the real ingest API and database; healthy with the rule off.
The steps listing agrees with the stored answer."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.constants import DEFAULT_CONFIG
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.model import JobSpec
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.correlate.sampling import resample
from tests.correlate.scenarios import post, stored_baselines

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
STEPS, START, LENGTH = 44, 18, 16


def test_a_step_a_device_states_fault_slowed_under_every_bar_is_slow_between_its_slow_steps(
        service_url: str, db_conn: psycopg.Connection) -> None:
    f = make_fault(build_cluster(SPEC), "pcie_downtrain", start_step=START, steps=LENGTH, severity=0.05,
                   variant="width", rng=np.random.default_rng(2))
    sc = generate(SPEC, job="fill-gap-pcie", steps=STEPS, faults=[f], seed=2, t0=1.791e9,
                  job_spec=JobSpec(step_jitter=0.015), slow_truth=0.04, healthy_truth=0.02)
    post(service_url, sc)
    bl, steps = stored_baselines(db_conn, sc.job, STEPS)
    engine = AttributionEngine()
    hidden = []
    for s in range(START + 1, START + LENGTH - 1):
        i = int(np.flatnonzero(steps == s)[0])
        if sc.truth[s].slow and not bl.slow[i] and not bl.borderline[i] and not sc.timeline.ckpt_steps[s]:
            hidden.append(s)
    assert hidden, "the scenario must hold a faulty step under every timing bar"
    for s in hidden:
        a = engine.attribute_step(db_conn, job=sc.job, step=s)
        assert a is not None and a["slow"] and (a["layer"], a["component"]) == ("compute", f.component), (s, a)
        assert any(e["source"] == f.component and e["metric"] == "pcie_link_width" for e in a["evidence"]), a
        assert any(e.get("kind") == "corroborated" for e in a["evidence"]), a
        # under its baseline or not, it lost no negative time
        assert a["lost_s"] >= 0.0 and all(c["lost_s"] >= 0.0 for c in a["causes"]), a
        off = AttributionEngine(replace(DEFAULT_CONFIG, fill_gap_steps=0)).attribute_step(
            db_conn, job=sc.job, step=s, store=False)
        assert off is not None and not off["slow"], (s, off)
    listed = {r["step"]: r["slow"] for r in engine.list_steps(db_conn, job=sc.job)}
    assert all(listed[s] for s in hidden), {s: listed[s] for s in hidden}
    # the steps after the fault, at their baseline, stay healthy: nothing slow after them
    for s in range(START + LENGTH + 1, STEPS - 2):
        a = engine.attribute_step(db_conn, job=sc.job, step=s, store=False)
        assert a is not None and not a["slow"], (s, a)


def test_steps_between_two_faults_of_one_link_are_not_filled_from_its_flap_counters(
        service_url: str, db_conn: psycopg.Connection) -> None:
    """A link flaps hard (+35 %) for 6 steps, then lightly (+5 %) from 4 steps later: the healthy steps
    between them sit inside 10-s samples of its flap and error counters that span both faults. A
    counter's rate over such a span is no state of the step's own seconds (causes.has_state_row), and
    the steps at the baseline between a +35 % fault and the next are not at its level
    (around.at_their_level): healthy. Either alone keeps them so; without both, step 22 was slow."""
    cluster = build_cluster(SPEC)
    loud = make_fault(cluster, "link_flap", start_step=16, steps=6, severity=0.35, variant="host_link",
                      rng=np.random.default_rng(65))
    quiet = replace(loud, start_step=26, steps=5, severity=0.05)
    sc = generate(SPEC, job="fill-gap-two-flaps", steps=STEPS, faults=[loud, quiet], seed=65, t0=1.792e9,
                  job_spec=JobSpec(step_jitter=0.015), slow_truth=0.04, healthy_truth=0.02, interval=1.0)
    resample(sc, {s: 10 for s in set(sc.streams.sources) if ":" in s}, np.random.default_rng(66))
    post(service_url, sc)
    engine = AttributionEngine()
    assert all(engine.attribute_step(db_conn, job=sc.job, step=s, store=False)["slow"]  # type: ignore[index]
               for s in range(17, 21))
    for s in range(22, 26):
        assert sc.truth[s].slow is False
        a = engine.attribute_step(db_conn, job=sc.job, step=s, store=False)
        assert a is not None and not a["slow"], (s, a)
