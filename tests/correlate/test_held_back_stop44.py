"""Three runs of the attribution bench held back at stop 44's first run (seeds 881), replayed through
the real ingest API and database, each with a rule it lacked:

- run 13: a +7.8 % slow write to one host's checkpoint volume (steps 30-35, which only the
  checkpoint step 30 feels). The volume's 5-s write-latency sample held the slow write into the plain
  steps after it, and named them: a step that writes no checkpoint is not explained by a volume's
  write signals (localize.WRITE_SIGNALS);
- runs 0 and 13: a one-step PCIe downtrain read under a second of its step (+3.7-3.8 %, faint),
  which a link state read every 2-10 s missed; the GPU 8 sigmas out in its rank's clocks, the ring
  slower too, and the GPU's PCIe replays counted (EngineConfig.error_rate_straggler);
- run 2: a throttled GPU's rank record of step 19 lost (the hook's post): no straggler in the
  timings, the step +25.8 % and `unknown`. The GPUs of the ranks that sent nothing are read for a
  state that alone slows them (device_probe.unreported_gpu);
- and 859 run 7 (held back at stop 43): step 52, +0.3 %, in a shift the sequential test dated from a
  noisy step before a NIC's fault, was slow with `unknown` (EngineConfig.unnamed_level_healthy)."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest

from bench.attribution import accuracy_runs
from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.constants import DEFAULT_CONFIG
from fabricscope.service.correlate.queries import rank_rows
from fabricscope.service.correlate.rules import ids
from fabricscope.service.simulate.generator import Scenario
from tests.correlate.scenarios import post


def _run(service_url: str, i: int, t0: float) -> Scenario:
    (sc,) = accuracy_runs(1, 881, first=i, t0=t0)
    return post(service_url, sc)


@pytest.fixture(scope="module")
def run13(service_url: str) -> Scenario:
    return _run(service_url, 13, 1.7941e9)


def test_a_checkpoint_volumes_slow_write_does_not_name_the_plain_steps_after_it(
        run13: Scenario, db_conn: psycopg.Connection) -> None:
    """Rule: a volume's write signals explain only a step that writes a checkpoint (localize.WRITE_SIGNALS)."""
    sc = run13
    f = next(f for f in sc.faults if f.kind == "storage_slow")
    assert (f.variant, f.start_step, f.steps) == ("ckpt", 30, 6)
    assert bool(sc.timeline.ckpt_steps[30]) and sc.truth[30].slow
    engine = AttributionEngine()
    a = engine.attribute_step(db_conn, job=sc.job, step=30, store=False)
    assert a is not None and a["slow"] and (a["layer"], a["component"]) == ("storage", f.component), a
    for s in (31, 32):  # plain steps inside the fault's span, which it did not slow
        assert sc.truth[s].slow is False and not sc.timeline.ckpt_steps[s]
        a = engine.attribute_step(db_conn, job=sc.job, step=s, store=False)
        assert a is not None and not a["slow"], (s, a)


@pytest.mark.parametrize(("run", "step"), [(0, 23), (13, 58)])
def test_a_faint_step_whose_straggler_gpus_pcie_replays_ran_is_slow_with_that_gpu(
        service_url: str, db_conn: psycopg.Connection, run13: Scenario, run: int, step: int) -> None:
    """Rule: a borderline step whose straggler GPU's wait and ring loss reach a slow step's share while its error
    counters run in the step's span is slow (corroborate.hidden_slow, EngineConfig.error_rate_straggler)."""
    sc = run13 if run == 13 else _run(service_url, run, 1.7942e9)
    f = next(f for f in sc.faults if f.kind == "pcie_downtrain" and f.active(step))
    assert sc.truth[step].slow and sc.truth[step].component == f.component
    a = AttributionEngine().attribute_step(db_conn, job=sc.job, step=step, store=False)
    assert a is not None and a["slow"] and (a["layer"], a["component"]) == ("compute", f.component), a
    rows = {(e["metric"], e.get("kind")) for e in a["evidence"]}
    assert ("compute_seconds", "timing") in rows and ("pcie_replays_total", None) in rows, a
    assert ("step_duration_seconds", "corroborated") in rows, a
    assert a["rules"]["verdict"] == ids.PROMOTE_ERROR_RATE, a["rules"]
    assert [e["rule"] for e in a["evidence"] if e.get("kind") == "corroborated"] == [ids.PROMOTE_ERROR_RATE], a
    # no link state in the step's own span: the rule that asks for one does not make it slow
    assert not any(e["metric"].startswith("pcie_link_") for e in a["evidence"]), a
    off = AttributionEngine(replace(DEFAULT_CONFIG, error_rate_straggler=False)).attribute_step(
        db_conn, job=sc.job, step=step, store=False)
    assert off is not None and not off["slow"] and off["rules"]["verdict"] == ids.VERDICT_UNDER_BAR, off


def test_a_slow_step_whose_straggler_sent_no_record_is_named_from_its_gpus_state(
        service_url: str, db_conn: psycopg.Connection) -> None:
    """Rule: local work lost with no straggler while some ranks sent no record is named from those ranks' GPUs' own
    state (device_probe.unreported_gpu)."""
    sc = _run(service_url, 2, 1.7943e9)
    f = next(f for f in sc.faults if f.kind == "gpu_thermal_throttle")
    assert f.start_step <= 19 < f.start_step + f.steps and sc.truth[19].component == f.component
    steps, _ = rank_rows(db_conn, job=sc.job, step=19)
    placed = {f"{h}:{g}" for h, g in zip(steps["host"], steps["gpu"], strict=True)}
    assert len(steps) == sc.cluster.ranks - 1 and f.component not in placed  # its rank's record lost
    a = AttributionEngine().attribute_step(db_conn, job=sc.job, step=19, store=False)
    assert a is not None and a["slow"] and (a["layer"], a["component"]) == ("compute", f.component), a
    assert any(e["metric"] == "gpu_throttle_active" and e["source"] == f.component for e in a["evidence"]), a
    assert a["rules"]["cause"] == ids.CAUSE_UNREPORTED_GPU, a["rules"]
    # its other steps, whose records came, name it from the ranks' clocks as before
    a = AttributionEngine().attribute_step(db_conn, job=sc.job, step=21, store=False)
    assert a is not None and a["component"] == f.component
    assert any(e.get("kind") == "timing" for e in a["evidence"]), a
    assert a["rules"]["cause"] == ids.CAUSE_STRAGGLER, a["rules"]


def test_a_level_step_only_the_sequential_test_flagged_that_names_nothing_is_healthy(
        service_url: str, db_conn: psycopg.Connection) -> None:
    """Rule: a step only the sequential test flagged, under FAINT_REL over its centre, that neither it nor its
    episode names a cause for, is healthy (EngineConfig.unnamed_level_healthy)."""
    (sc,) = accuracy_runs(1, 859, first=7, t0=1.7944e9)
    post(service_url, sc)
    f = next(f for f in sc.faults if f.kind == "tcp_retransmits")
    assert f.start_step == 54 and sc.truth[52].slow is False
    engine = AttributionEngine()
    a = engine.attribute_step(db_conn, job=sc.job, step=52, store=False)
    assert a is not None and not a["slow"] and [e["kind"] for e in a["evidence"]] == ["onset"], a
    assert a["rules"] == {"verdict": ids.DEMOTE_UNNAMED_LEVEL, "cause": None, "adjust": []}, a["rules"]
    for s in (55, 56):  # the fault's steps keep their cause
        a = engine.attribute_step(db_conn, job=sc.job, step=s, store=False)
        assert a is not None and a["slow"] and a["layer"] == "nic", (s, a)
    off = AttributionEngine(replace(DEFAULT_CONFIG, unnamed_level_healthy=False)).attribute_step(
        db_conn, job=sc.job, step=52, store=False)
    assert off is not None and off["slow"] and off["layer"] == "unknown", off
    assert off["rules"]["verdict"] == ids.VERDICT_SEQUENTIAL and off["rules"]["cause"] == ids.CAUSE_UNKNOWN, off
