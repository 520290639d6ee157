"""An episode's onset that shows nothing of its own (issue #15): the sequential test places a shift's
onset where its evidence last was zero, so a healthy step just before a fault that happened to run
a little long is folded into the episode. The per-step test did not flag it and its telemetry names
nothing: it is not slow (Baselines.onset), where it used to list the episode's cause. A fault's
first step that its own telemetry names stays slow. Through the real ingest API and database."""

from __future__ import annotations

import httpx
import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.engine import ONSET_KIND
from fabricscope.service.correlate.rules import ids
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.model import JobSpec
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.correlate.scenarios import longer_step, post, stored_baselines

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
START, LENGTH, STEPS = 42, 14, 66


def _scenario(name: str, seed: int, onset: float = 0.0, severity: float = 0.07) -> tuple[Scenario, object]:
    f = make_fault(build_cluster(SPEC), "gpu_thermal_throttle", start_step=START, steps=LENGTH, severity=severity,
                   rng=np.random.default_rng(seed), onset=onset)
    sc = generate(SPEC, job=f"onset-{name}", steps=STEPS, faults=[f], seed=seed, t0=1.782e9 + seed * 1e4,
                  job_spec=JobSpec(compute_noise=0.004))
    return sc, f


def test_a_long_healthy_step_folded_into_a_shift_is_not_slow(service_url: str, api: httpx.Client,
                                                              db_conn: psycopg.Connection) -> None:
    # +5 %: a long step 3.5 % over before a +7 % fault is parted from it as the job's noise already
    # (sequential._drift_prefix: the levels 3 standard errors apart); before a +5 % one it is not
    sc, f = _scenario("folded", 3, severity=0.05)
    d = sc.timeline.step_duration()
    healthy = float(np.median(d[10:START]))
    longer_step(sc.timeline, START - 1, healthy * 1.035 - float(d[START - 1]))  # +3.5 %: under the bar
    assert not sc.truth[START - 1].slow
    post(service_url, sc)
    bl, steps = stored_baselines(db_conn, sc.job, STEPS)
    i = int(np.flatnonzero(steps == START - 1)[0])
    # the sequential test put the shift's onset at the long step, the per-step test did not flag it
    assert bl.slow[i] and not bl.step_slow[i] and bl.onset[i] and bl.episode[i + 1] == i
    engine = AttributionEngine()
    a = engine.attribute_step(db_conn, job=sc.job, step=START - 1)
    assert a is not None and not a["slow"] and a["layer"] == "none", a
    assert [e["kind"] for e in a["evidence"]] == [ONSET_KIND], a["evidence"]
    assert a["rules"] == {"verdict": ids.DEMOTE_UNSURE_ONSET, "cause": None, "adjust": []}, a["rules"]
    # the fault's own steps keep its cause
    for s in range(START, START + LENGTH):
        b = engine.attribute_step(db_conn, job=sc.job, step=s)
        assert b is not None and b["slow"] and (b["layer"], b["component"]) == (f.layer, f.component), b  # type: ignore[attr-defined]
        assert b["rules"]["verdict"] in (ids.VERDICT_BAR, ids.VERDICT_SEQUENTIAL), (s, b["rules"])
        assert b["rules"]["cause"] == ids.CAUSE_STRAGGLER, (s, b["rules"])
    # the steps listing agrees once the attribution is stored, and the background pass's restatement
    # does not take it up again (its flag differs from the baseline's for good)
    rows = {r["step"]: r for r in api.get(f"/v1/jobs/{sc.job}/steps").json()}
    listed = {s: r["slow"] for s, r in rows.items()}
    assert listed[START - 1] is False and listed[START] is True
    assert rows[START - 1]["verdict"] == ids.DEMOTE_UNSURE_ONSET, rows[START - 1]
    assert engine._restate(db_conn, job=sc.job, lo=START - 4, hi=START + LENGTH) == 0


def test_a_faults_first_step_its_telemetry_names_stays_slow(service_url: str, db_conn: psycopg.Connection) -> None:
    sc, f = _scenario("named", 3, onset=0.4)  # the fault begins 40 % into its first step
    post(service_url, sc)
    bl, steps = stored_baselines(db_conn, sc.job, STEPS)
    i = int(np.flatnonzero(steps == START)[0])
    assert bl.slow[i] and not bl.step_slow[i] and bl.onset[i]
    a = AttributionEngine().attribute_step(db_conn, job=sc.job, step=START)
    assert a is not None and a["slow"] and (a["layer"], a["component"]) == (f.layer, f.component), a  # type: ignore[attr-defined]
    assert "timing" in [e.get("kind") for e in a["evidence"]]
    # slow by the sequential test alone (not the per-step bar), named by its own straggler
    assert a["rules"]["verdict"] == ids.VERDICT_SEQUENTIAL and a["rules"]["cause"] == ids.CAUSE_STRAGGLER, a["rules"]
