"""A noisy step right after a network fault (issue #15): the sequential test folds a healthy step that
happened to run long into the shift before it, and the fault's samples (here every 6 s) cover that
step's seconds too, so its window names the fault's NIC. The network loss such a cause costs is not in
the step's own collectives (their pure transfer time is at its baseline): it is not slow, with an
`untimed` evidence row, and the steps listing agrees. The fault's own steps, whose collectives lost
the time, stay slow with the NIC. Through the real ingest API and database."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.baseline import compute_baselines
from fabricscope.service.correlate.rules import ids
from fabricscope.service.correlate.untimed import UNTIMED_KIND, ring_loss
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.model import JobSpec
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster, random_storage_names
from tests.correlate.scenarios import longer_step, post, stored_baselines

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
START, LENGTH, STEPS = 42, 12, 66
AFTER = START + LENGTH  # the first step after the fault


def _long_step_after(service_url: str, api: httpx.Client, db_conn: psycopg.Connection, spec: ClusterSpec,
                     kind: str, seed: int, t0: float, timed: str, metric: str, layer: str,
                     causes: frozenset[str]) -> None:
    """A `kind` fault of steps START..AFTER-1 (+5 %, samples every 6 s) and a healthy step right after
    it that ran 3.5 % long (under the bar). The sequential test puts that step in the shift, the
    per-step test does not, nor does the phase the fault slows (`timed`: the Baselines flag): it is
    not slow, with one `untimed` row of `metric`, and the listing agrees; the fault's own steps keep
    (`layer`, its component), named by one of the cause rules `causes`."""
    f = make_fault(build_cluster(spec), kind, start_step=START, steps=LENGTH, severity=0.05,
                   rng=np.random.default_rng(seed))
    # t0: a time range no other test of the database uses (hosts share names across tests)
    sc = generate(spec, job=f"untimed-after-{kind}", steps=STEPS, faults=[f], seed=seed, t0=t0, interval=6.0,
                  job_spec=JobSpec(compute_noise=0.004))
    d = sc.timeline.step_duration()
    longer_step(sc.timeline, AFTER, float(np.median(d[10:START])) * 1.035 - float(d[AFTER]))
    assert not sc.truth[AFTER].slow
    post(service_url, sc)
    bl, steps = stored_baselines(db_conn, sc.job, STEPS)
    i = int(np.flatnonzero(steps == AFTER)[0])
    assert bl.slow[i] and not bl.step_slow[i] and not getattr(bl, timed)[i]
    engine = AttributionEngine()
    a = engine.attribute_step(db_conn, job=sc.job, step=AFTER)
    assert a is not None and not a["slow"] and a["layer"] == "none", a
    assert [(e["kind"], e["metric"]) for e in a["evidence"]] == [(UNTIMED_KIND, metric)], a["evidence"]
    assert a["evidence"][0]["score"] < 4.0
    assert a["rules"] == {"verdict": ids.DEMOTE_UNTIMED, "cause": None, "adjust": []}, a["rules"]
    for s in (START + 1, AFTER - 1):
        b = engine.attribute_step(db_conn, job=sc.job, step=s)
        assert b is not None and b["slow"] and (b["layer"], b["component"]) == (layer, f.component), (s, b)
        assert b["rules"]["verdict"] in (ids.VERDICT_BAR, ids.VERDICT_SEQUENTIAL), (s, b["rules"])
        assert b["rules"]["cause"] in causes, (s, b["rules"])
    rows = {r["step"]: r for r in api.get(f"/v1/jobs/{sc.job}/steps").json()}
    assert rows[AFTER]["slow"] is False and rows[AFTER - 1]["slow"] is True
    assert rows[AFTER]["verdict"] == ids.DEMOTE_UNTIMED, rows[AFTER]


def test_a_long_step_after_a_network_fault_is_not_slow_when_its_collectives_lost_nothing(
        service_url: str, api: httpx.Client, db_conn: psycopg.Connection) -> None:
    _long_step_after(service_url, api, db_conn, SPEC, "nic_degradation", 4, 1.7865e9, "net_timing",
                     "collective_transfer_seconds", "nic",
                     frozenset({ids.CAUSE_NETWORK_SIGNAL, ids.CAUSE_BACKPRESSURE}))


def test_a_long_step_after_a_shared_volume_slowdown_is_not_slow_when_its_loaders_lost_nothing(
        service_url: str, api: httpx.Client, db_conn: psycopg.Connection) -> None:
    """The same of a shared volume every host's loader reads (731 run 2 step 30): its slowdown is in
    the ranks' `data` phase by its nature, so a step whose loaders read at their usual pace is not
    slowed by it, whatever the volume's 6-s samples covering its seconds say."""
    spec = dataclasses.replace(SPEC, **random_storage_names(np.random.default_rng(5)))  # type: ignore[arg-type]
    _long_step_after(service_url, api, db_conn, spec, "shared_volume_slow", 5, 1.7872e9, "data_timing",
                     "data_seconds", "storage", frozenset({ids.CAUSE_SHARED_STORAGE, ids.CAUSE_VOLUME_SIGNAL}))


def test_a_long_step_after_a_gpu_fault_is_not_slow_when_that_gpus_rank_did_no_more_work(
        service_url: str, api: httpx.Client, db_conn: psycopg.Connection) -> None:
    """The same of a GPU (731 run 0 step 49, after a +45 % throttle): its fault slows its own rank's
    local work by its nature, so a step in which that rank worked no longer than the others was not
    slowed by it, whatever the episode before it or the GPU's 6-s samples covering its seconds say.
    Rule: a GPU or host cause whose ranks did no more local work did not slow a step only the sequential test
    flagged (untimed._untimed_work)."""
    _long_step_after(service_url, api, db_conn, SPEC, "gpu_thermal_throttle", 6, 1.7879e9, "net_timing",
                     "local_work_seconds", "compute", frozenset({ids.CAUSE_STRAGGLER}))


def _gpu_answer(metric: str) -> Any:
    return {"layer": "compute", "component": "n1:gpu2", "evidence": [
        {"source": "n1:gpu2", "metric": metric, "value": 4.0, "baseline": 16.0, "score": 12.0, "unit": "lanes"}]}


def test_the_rings_loss_counts_for_a_gpu_whose_own_state_slows_its_hop_of_the_ring() -> None:
    """781 run 33 step 32: a PCIe downtrain's step only the sequential test flagged, its GPU's work
    34.8 % of the step's excess (under straggler_min_share) and its collectives' transfer 35 % more.
    A link trained down carries the GPU's share of every all-reduce: the collectives' loss over their
    baseline counts with the work. Not for a GPU whose evidence holds no such state (a hot GPU), nor
    when the collectives ran faster than their baseline.
    Rule: for a GPU whose own state slows its ring hop, the collectives' loss counts with its work
    (untimed._untimed_work)."""
    n = 20  # a steady job whose collectives' pure transfer is 0.30 s a step
    bl = compute_baselines(np.full(n, 2.0), np.full(n, 0.30), np.zeros(n, bool), np.zeros(n))
    i = n - 1
    assert bl.base_transfer[i] == pytest.approx(0.30)
    row = {"transfer": 0.395}
    assert ring_loss(_gpu_answer("pcie_link_width"), bl, i, row, "n1:gpu2") == pytest.approx(0.095)
    assert ring_loss(_gpu_answer("gpu_temperature_celsius"), bl, i, row, "n1:gpu2") == 0.0
    assert ring_loss(_gpu_answer("pcie_link_width"), bl, i, row, "n1:gpu3") == 0.0
    assert ring_loss(_gpu_answer("pcie_link_width"), bl, i, {"transfer": 0.25}, "n1:gpu2") == 0.0
    assert ring_loss(_gpu_answer("pcie_link_width"), bl, i, {"transfer": float("nan")}, "n1:gpu2") == 0.0
