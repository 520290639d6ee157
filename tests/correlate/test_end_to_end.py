"""Simulated faults sent through the real ingest API into the real database, then attributed.

Each job gets its own time range (the cluster and its sources are shared, as in life)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine, EngineConfig
from fabricscope.service.correlate.invariants import violations
from fabricscope.service.correlate.records import Attribution
from fabricscope.service.correlate.rules import BY_ID, ids
from fabricscope.service.simulate.faults import Fault, make_fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.correlate.scenarios import post

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
STEPS = 32
_slot = itertools.count()
ENGINE = AttributionEngine()  # one per process, as the service has: the tests share its caches

CASES = [("gpu_straggler", ""), ("host_contention", ""), ("nic_degradation", ""),
         ("link_errors", "host_link"), ("link_errors", "uplink"), ("link_flap", "host_link"),
         ("link_flap", "uplink"), ("fabric_congestion", "leaf_down_pfc"), ("fabric_congestion", "leaf_down_ecn"),
         ("fabric_congestion", "leaf_up_ecn"), ("fabric_congestion", "spine_pfc"),
         ("storage_slow", "ckpt"), ("storage_slow", "data")]
# the cause rule that names each case: a straggler's timing (with its volume), or the network's signals:
# the degraded NIC through the pause its peers received (followed back to it), the others by their own
CAUSE_RULES: dict[str, str] = {
    "gpu_straggler": ids.CAUSE_STRAGGLER, "host_contention": ids.CAUSE_HOST_STRAGGLER,
    "nic_degradation": ids.CAUSE_BACKPRESSURE, "link_errors": ids.CAUSE_NETWORK_SIGNAL,
    "link_flap": ids.CAUSE_NETWORK_SIGNAL, "fabric_congestion": ids.CAUSE_NETWORK_SIGNAL,
    "storage_slow": ids.CAUSE_STRAGGLER_VOLUME}


def _fault(kind: str, variant: str, seed: int, start: int = 20, steps: int = 3, sev: float = 0.3) -> Fault:
    rng = np.random.default_rng(seed)
    return make_fault(build_cluster(SPEC), kind, start_step=start, steps=steps, severity=sev, variant=variant,
                      rng=rng)


def _send(url: str, faults: list[Fault], *, seed: int, name: str, **kw: Any) -> Scenario:
    sc = generate(SPEC, job=f"e2e-{name}-{next(_slot)}", steps=STEPS, faults=faults, seed=seed,
                  t0=1.72e9 + next(_slot) * 5000.0, **kw)
    return post(url, sc)


def _check_evidence(conn: psycopg.Connection, a: Attribution, start: float) -> None:
    """Every telemetry evidence row names a stored source+metric whose values show the anomaly."""
    for e in a["evidence"]:
        if e.get("kind") == "timing":
            continue
        row = conn.execute(
            "SELECT max(CASE WHEN metric LIKE '%%_total' THEN rate ELSE value END) FROM sample_view "
            "WHERE source = %s AND metric = %s AND ts > to_timestamp(%s) AND ts <= to_timestamp(%s)",
            (e["source"], e["metric"], start, start + 15)).fetchone()
        assert row is not None and row[0] is not None, e
        assert row[0] >= 0.99 * e["value"] and e["value"] > e["baseline"], e


@pytest.mark.parametrize(("kind", "variant"), CASES, ids=[f"{k}-{v}" if v else k for k, v in CASES])
def test_fault_kind_is_attributed(service_url: str, db_conn: psycopg.Connection, kind: str, variant: str) -> None:
    f = _fault(kind, variant, seed=len(kind) + len(variant))
    if kind == "storage_slow" and variant == "ckpt":
        f = _fault(kind, variant, seed=3, start=19, steps=3)  # covers the checkpoint of step 20
    sc = _send(service_url, [f], seed=5, name=kind)
    slow = [t for t in sc.truth.values() if t.slow]
    assert slow
    for t in slow:
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=t.step)
        assert a is not None and a["slow"], (t, a)
        assert (a["layer"], a["component"]) == (f.layer, f.component), a
        assert a["lost_s"] > 0 and 0 < a["confidence"] <= 1 and a["evidence"]
        assert set(a) >= {"step", "slow", "duration_s", "baseline_s", "layer", "component", "confidence",
                          "lost_s", "evidence"}
        assert all(set(e) >= {"source", "metric", "value", "baseline", "score"} for e in a["evidence"])
        _check_evidence(db_conn, a, sc.t0 + float(sc.timeline.start[t.step].min()) - 0.1)
        # the answer names the rules that decided it, and keeps the invariants (a kind fixes its layer)
        rules = a["rules"]
        assert rules["verdict"] in BY_ID and rules["verdict"].split(".")[0] in ("verdict", "promote"), rules
        assert rules["cause"] in BY_ID and rules["cause"].startswith("cause."), rules
        assert all(c["rule"] in BY_ID for c in a["causes"]) and a["causes"][0]["rule"] == rules["cause"]
        assert rules["cause"] == CAUSE_RULES[kind], (t.step, rules)
        bar = ids.VERDICT_CHECKPOINT_BAR if sc.timeline.ckpt_steps[t.step] else ids.VERDICT_BAR
        assert rules["verdict"] in (bar, ids.VERDICT_SEQUENTIAL), (t.step, rules)
        assert violations(a, ENGINE._job_topo(db_conn, sc.job)[1].role) == [], a
    healthy = [t.step for t in sc.truth.values() if t.slow is False and t.step > 8]
    for s in healthy:
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=s)
        assert a is not None and not a["slow"] and a["layer"] == "none", a
        assert a["rules"] == {"verdict": ids.VERDICT_UNDER_BAR, "cause": None, "adjust": []}, a


def test_two_causes_are_ranked(service_url: str, db_conn: psycopg.Connection) -> None:
    net = _fault("fabric_congestion", "spine_pfc", seed=1, sev=0.5)
    gpu = _fault("gpu_straggler", "", seed=2, sev=0.15)
    sc = _send(service_url, [net, gpu], seed=6, name="multi")
    t = sc.truth[21]
    assert [c["component"] for c in t.causes] == [net.component, gpu.component]
    a = ENGINE.attribute_step(db_conn, job=sc.job, step=21)
    assert a is not None and a["slow"]
    assert [(c["layer"], c["component"]) for c in a["causes"][:2]] == [
        (net.layer, net.component), (gpu.layer, gpu.component)]
    assert a["causes"][0]["lost_s"] > a["causes"][1]["lost_s"] > 0
    assert (a["layer"], a["component"]) == (net.layer, net.component)
    # the engine's configuration is its own: a higher listing bar drops the minor cause
    strict = AttributionEngine(EngineConfig(min_share=a["causes"][1]["lost_s"] / a["lost_s"] + 0.01))
    b = strict.attribute_step(db_conn, job=sc.job, step=21, store=False)
    assert b is not None and [(c["layer"], c["component"]) for c in b["causes"]] == [(net.layer, net.component)]


def test_missing_telemetry_lowers_confidence(service_url: str, db_conn: psycopg.Connection) -> None:
    f = _fault("fabric_congestion", "leaf_down_pfc", seed=4)
    full = _send(service_url, [f], seed=8, name="full")
    gap = generate(SPEC, job="x", steps=STEPS, faults=[f], seed=8)
    # the congested port's own counters never arrive during the fault (collector down)
    st = gap.streams
    rows = np.array([s == f.component for s in st.sources])
    t_a, t_b = float(gap.timeline.start[f.start_step].min()) - 5, float(gap.timeline.end[22].max()) + 10
    st.keep[rows[:, None] & (st.ts > t_a) & (st.ts < t_b)] = False
    gap.job, gap.t0 = f"e2e-gap-{next(_slot)}", 1.72e9 + next(_slot) * 5000.0
    post(service_url, gap)
    for s in (20, 21, 22):
        a_full = ENGINE.attribute_step(db_conn, job=full.job, step=s)
        a_gap = ENGINE.attribute_step(db_conn, job=gap.job, step=s)
        assert a_full and a_gap and a_gap["slow"]
        assert a_gap["confidence"] < a_full["confidence"], (a_gap, a_full)
        assert a_gap["layer"] in ("fabric", "unknown")


def test_clock_skew_does_not_change_the_answer(service_url: str, db_conn: psycopg.Connection) -> None:
    faults = [_fault("gpu_straggler", "", seed=11, start=12, sev=0.1), _fault("host_contention", "", seed=12,
                                                                             start=20, sev=0.1)]
    runs = [_send(service_url, faults, seed=13, name=f"skew{s}", skew_s=s) for s in (0.0, 0.05)]
    assert np.ptp(runs[1].host_skew) > 0.03
    for s in range(STEPS):
        a, b = (ENGINE.attribute_step(db_conn, job=r.job, step=s) for r in runs)
        assert a and b
        assert (a["slow"], a["layer"], a["component"]) == (b["slow"], b["layer"], b["component"]), s
        assert a["rules"] == b["rules"], s
        if a["baseline_s"] is None:  # a job's first steps: too little history to judge
            assert a["rules"]["verdict"] == ids.VERDICT_HISTORY and not a["slow"], (s, a)
    assert ENGINE.attribute_step(db_conn, job=runs[0].job, step=0)["rules"]["verdict"] == ids.VERDICT_HISTORY  # type: ignore[index]


def test_listing_report_and_pending(service_url: str, db_conn: psycopg.Connection) -> None:
    f = _fault("nic_degradation", "", seed=21)
    sc = _send(service_url, [f], seed=22, name="report")
    assert ENGINE.attribute_step(db_conn, job=sc.job, step=999) is None
    # nothing judged yet: the listing says so (verdict None) and gives the baseline's flag meanwhile
    assert {s["verdict"] for s in ENGINE.list_steps(db_conn, job=sc.job)} == {None}
    n = ENGINE.process_pending(db_conn, job=sc.job)
    assert n == STEPS
    assert ENGINE.process_pending(db_conn, job=sc.job) == 0
    stored = db_conn.execute("SELECT count(*), count(*) FILTER (WHERE slow) FROM attributions WHERE job = %s",
                             (sc.job,)).fetchone()
    want_slow = sum(1 for t in sc.truth.values() if t.slow)
    assert stored == (STEPS, want_slow)
    steps = ENGINE.list_steps(db_conn, job=sc.job, slow_only=True)
    assert [s["step"] for s in steps] == [t.step for t in sc.truth.values() if t.slow]
    # judged steps are listed with the rule that judged them (nic_degradation at +30 %: the per-step
    # bar, a checkpoint step's own bar at a checkpoint step)
    assert all(set(s) == {"step", "start", "duration_s", "baseline_s", "slow", "verdict"} for s in steps)
    assert [s["verdict"] for s in steps] == [ids.VERDICT_CHECKPOINT_BAR if sc.timeline.ckpt_steps[s["step"]]
                                             else ids.VERDICT_BAR for s in steps], steps
    rep = ENGINE.job_report(db_conn, job=sc.job)
    assert rep["layers"][0]["layer"] == "nic" and rep["components"][0]["component"] == f.component
    assert rep["lost_s"] == pytest.approx(sum(c["lost_s"] for c in rep["layers"]))


@pytest.mark.parametrize(("before_s", "explained"), [(4.0, True), (25.0, False)])
def test_a_link_that_went_down_just_before_a_step_explains_it(service_url: str, db_conn: psycopg.Connection,
                                                               before_s: float, explained: bool) -> None:
    """As in the lab: the link was down before the slow step began (transports still backing off), and
    the link-down counter is the only evidence. Within the engine's aftermath window (10 s) it names
    the link; well before it, it must not."""
    f = _fault("link_flap", "host_link", seed=31, steps=1)
    sc = generate(SPEC, job=f"e2e-aftermath-{next(_slot)}", steps=STEPS, faults=[f], seed=32,
                  t0=1.72e9 + next(_slot) * 5000.0)
    st = sc.streams
    t_down = float(sc.timeline.start[f.start_step].min()) - before_s
    flapped = [i for i, m in enumerate(st.metrics) if m == "link_down_total" and np.ptp(st.values[i]) > 0]
    ends = {st.sources[i] for i in flapped}
    assert f.component in ends and len(ends) == 2
    for i, (src, m) in enumerate(zip(st.sources, st.metrics, strict=True)):
        if src in ends and st.kinds[i] == "counter":  # no other evidence: errors, retransmits stay flat
            st.values[i] = st.values[i, 0] + (m == "link_down_total") * (st.ts[i] >= t_down)
    post(service_url, sc)
    a = ENGINE.attribute_step(db_conn, job=sc.job, step=f.start_step)
    assert a is not None and a["slow"]
    assert ((a["layer"], a["component"]) == ("link", f.component)) is explained, a
    if explained:
        assert [e["metric"] for e in a["evidence"] if e.get("kind") != "timing"][0] == "link_down_total", a


def test_a_long_fault_still_stands_out_from_its_own_past(service_url: str, db_conn: psycopg.Connection) -> None:
    """Congestion for 16 steps (~35 s): by its last steps a third or more of the port's recent history
    is the fault itself. The port must still be named (the history's spread is a MAD, which a third
    of anomalous samples does not move; an interquartile range would)."""
    f = _fault("fabric_congestion", "leaf_down_ecn", seed=41, start=14, steps=16)
    sc = _send(service_url, [f], seed=42, name="long")
    late = [t.step for t in sc.truth.values() if t.slow and t.step >= 24]
    assert len(late) >= 4
    for s in late:
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=s)
        assert a is not None and a["slow"]
        assert (a["layer"], a["component"]) == (f.layer, f.component), (s, a)
