"""Checkpoint steps of jobs that post no `checkpoint` events (#44): such jobs mark the write with
rec.phase("checkpoint") or not at all, so nothing but the step's own timings and the volumes' write
telemetry says a checkpoint was written, and where. Simulated, sent through the real ingest API into
the real database, then attributed, in each of the three ways a job may mark its checkpoints
(JobSpec.checkpoint_marks: events, phase, none).

Two principles:
- the checkpoint bar: a checkpoint step is judged against the job's earlier checkpoint steps, with a
  floor from its ordinary steps; checkpoint steps are rare, and a bar from their few points must
  neither make a step twice as long as they were look normal nor make a healthy write look slow;
- the volume's write signal: the volume whose write latency and written bytes rose during the step,
  the only one of the job's volumes that did, is the step's cause (not its host, not `unknown`), be it
  a host's own checkpoint mount or a shared volume on a storage system.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Literal

import numpy as np
import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.baseline import compute_baselines
from fabricscope.service.correlate.constants import DEFAULT_CONFIG
from fabricscope.service.correlate.rules import ids
from fabricscope.service.simulate.faults import CKPT_LATENCY, SHARED_CKPT, Fault, make_fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.model import JobSpec, Timeline
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.correlate.scenarios import longer_write, post

SPEC = ClusterSpec(hosts=4, gpus_per_host=2, nics_per_host=1, leaves=1, spines=1)
CLUSTER = build_cluster(SPEC)
STEPS = 44
EVERY = JobSpec().ckpt_every  # checkpoint steps 10, 20, 30, 40
CHECKPOINTS = tuple(range(EVERY, STEPS, EVERY))
SLOW = 3 * EVERY  # the third checkpoint step: two healthy ones before it
Marks = Literal["events", "phase", "none"]
To = Literal["local", "shared"]
MARKS: tuple[Marks, ...] = ("events", "phase", "none")
# write latency three times its usual: a write three times as long (model: 1 + severity x step / write)
SEVERITY = 0.8
ENGINE = AttributionEngine()  # one per process, as the service has
_slot = itertools.count()
_posted: dict[tuple[Any, ...], Scenario] = {}


def _scenario(url: str, name: str, marks: Marks, *, to: To = "local", faults: tuple[Fault, ...] = (),
              seed: int = 4, edit: Callable[[Timeline], None] | None = None) -> Scenario:
    """The scenario `name` in `marks` mode, posted once per module (tests that judge other steps of
    the same job share it)."""
    key = (name, marks, to)
    if key not in _posted:
        sc = generate(SPEC, job=f"ckpt44-{name}-{marks}-{to}-{next(_slot)}", steps=STEPS, faults=list(faults),
                      seed=seed, t0=1.7955e9 + next(_slot) * 5000.0,
                      job_spec=JobSpec(checkpoint_marks=marks, checkpoint_to=to))
        if edit is not None:
            edit(sc.timeline)
        _posted[key] = post(url, sc)
    return _posted[key]


def _answer(a: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The engine's answer in short, for a failing assertion's message."""
    if a is None:
        return None
    return {"slow": a["slow"], "layer": a["layer"], "component": a["component"],
            "duration_s": round(a["duration_s"], 3), "baseline_s": a.get("baseline_s"), "rules": a.get("rules"),
            "causes": [(c["layer"], c["component"], round(c["lost_s"], 3)) for c in a.get("causes", [])[:3]]}


def _write_signals(sc: Scenario, volume: str, step: int) -> tuple[float, float, float]:
    """The volume's write latency in checkpoint step `step` over its peak in the earlier checkpoint
    steps, and the bytes written to it during the step and during the three plain steps before it."""
    st, tl = sc.streams, sc.timeline
    rows = {m: i for i, (s, m) in enumerate(zip(st.sources, st.metrics, strict=True)) if s == volume}

    def during(metric: str, lo: int, hi: int) -> np.ndarray:
        i = rows[metric]
        ts = st.ts[i]
        on = (ts > tl.start[lo].min()) & (ts <= tl.end[hi].max() + 2.0)
        v = np.diff(st.values[i], prepend=st.values[i, 0]) if metric.endswith("_total") else st.values[i]
        return v[on]

    lat = during("write_latency_seconds", step, step).max()
    before = max(during("write_latency_seconds", c, c).max() for c in CHECKPOINTS if c < step)
    return (float(lat / before), float(during("write_bytes_total", step, step).sum()),
            float(during("write_bytes_total", step - 3, step - 1).sum()))


def _slow_local(url: str, marks: Marks) -> tuple[Scenario, Fault]:
    """One host's own checkpoint volume: its write latency triples at checkpoint step SLOW."""
    f = make_fault(CLUSTER, "storage_slow", variant=CKPT_LATENCY, start_step=SLOW, steps=1, severity=SEVERITY,
                   rng=np.random.default_rng(2))
    return _scenario(url, "local", marks, faults=(f,)), f


def _slow_shared(url: str, marks: Marks) -> tuple[Scenario, Fault]:
    """Every host writes its checkpoint to the storage system's shared volume, slow at step SLOW."""
    f = make_fault(CLUSTER, "storage_slow", variant=SHARED_CKPT, start_step=SLOW, steps=1, severity=SEVERITY,
                   rng=np.random.default_rng(2))
    return _scenario(url, "shared", marks, to="shared", faults=(f,)), f


@pytest.mark.parametrize("marks", MARKS)
def test_volume_write_signal_names_a_hosts_own_checkpoint_volume(service_url: str, db_conn: psycopg.Connection,
                                                                  marks: Marks) -> None:
    """Rule: at a checkpoint step, the volume whose write latency and written bytes rose, alone of the
    job's volumes, is the cause: storage, that volume (host:/mount), not its host, whether the job
    posts checkpoint events, only the phase, or neither."""
    sc, f = _slow_local(service_url, marks)
    ratio, written, idle = _write_signals(sc, f.component, SLOW)
    assert sc.truth[SLOW].slow and 2.5 < ratio < 3.5 and written > 0 and idle == 0, (ratio, written, idle)
    a = ENGINE.attribute_step(db_conn, job=sc.job, step=SLOW)
    assert a is not None and a["slow"], _answer(a)
    assert (a["layer"], a["component"]) == ("storage", f.component), _answer(a)
    assert a["rules"]["verdict"] == ids.VERDICT_CHECKPOINT_BAR, _answer(a)
    # its host wrote slowly (a checkpoint straggler), and the volume it wrote to is named with it
    assert a["rules"]["cause"] == ids.CAUSE_STRAGGLER_VOLUME, _answer(a)


@pytest.mark.parametrize("marks", MARKS)
def test_volume_write_signal_names_a_shared_checkpoint_volume(service_url: str, db_conn: psycopg.Connection,
                                                              marks: Marks) -> None:
    """Rule: the volume's write signal names a shared volume on a storage system as it names a host's
    own: every host's write took longer alike (no host straggles), and the storage system's volume is
    the one whose write latency and written bytes rose. Not `unknown`."""
    sc, f = _slow_shared(service_url, marks)
    assert f.component == CLUSTER.shared_source
    ratio, written, idle = _write_signals(sc, f.component, SLOW)
    assert sc.truth[SLOW].slow and 2.5 < ratio < 3.5 and written > 0 and idle == 0, (ratio, written, idle)
    a = ENGINE.attribute_step(db_conn, job=sc.job, step=SLOW)
    assert a is not None and a["slow"], _answer(a)
    assert (a["layer"], a["component"]) == ("storage", f.component), _answer(a)
    assert a["rules"]["verdict"] == ids.VERDICT_CHECKPOINT_BAR, _answer(a)
    # no host straggles: the volume's own signal, the volume a checkpoint volume (cause.written_volume
    # when the job posts no events: the volume written during the step)
    assert a["rules"]["cause"] == ids.CAUSE_VOLUME_SIGNAL, _answer(a)
    if marks == "phase":  # with cause.written_volume off, nothing says the write went to that volume
        off = AttributionEngine(replace(DEFAULT_CONFIG, disabled=frozenset({ids.CAUSE_WRITTEN_VOLUME})))
        b = off.attribute_step(db_conn, job=sc.job, step=SLOW, store=False)
        assert b is not None and b["component"] != f.component, _answer(b)


@pytest.mark.parametrize("earlier", (1, 2))
@pytest.mark.parametrize("marks", MARKS)
def test_checkpoint_bar_flags_a_checkpoint_step_twice_its_predecessors(service_url: str,
                                                                      db_conn: psycopg.Connection, marks: Marks,
                                                                      earlier: int) -> None:
    """Rule: a checkpoint step is judged against the job's earlier checkpoint steps with a floor from
    its ordinary steps: however few earlier checkpoints there are (one, two), a checkpoint step that
    takes twice as long as they did is slow. (Every host's write took longer alike and the volumes'
    telemetry shows nothing: only the bar can find it.)"""
    step = EVERY * (earlier + 1)

    def twice(tl: Timeline) -> None:
        d = tl.step_duration()
        longer_write(tl, step, 2 * float(np.mean(d[list(CHECKPOINTS[:earlier])])) - float(d[step]))

    sc = _scenario(service_url, f"twice{earlier}", marks, edit=twice)
    d = sc.timeline.step_duration()
    assert abs(d[step] / np.mean(d[list(CHECKPOINTS[:earlier])]) - 2) < 0.02
    a = ENGINE.attribute_step(db_conn, job=sc.job, step=step)
    assert a is not None and a["slow"], _answer(a)
    # its own bar, as a checkpoint step (one its job did not mark: known by its volumes' write burst)
    assert a["rules"]["verdict"] == ids.VERDICT_CHECKPOINT_BAR, _answer(a)
    assert a["lost_s"] > 0.5 * (d[step] - d[step - EVERY]), _answer(a)  # about what the longer write added


@pytest.mark.parametrize("to", ("local", "shared"))
@pytest.mark.parametrize("marks", MARKS)
def test_checkpoint_bar_passes_healthy_checkpoint_steps(service_url: str, db_conn: psycopg.Connection, marks: Marks,
                                                       to: To) -> None:
    """Rule: a checkpoint step is judged against the earlier checkpoint steps (floor: the ordinary
    steps), so a write that takes its usual time is no slow step, though the step is longer than a
    plain one and every checkpoint raises its volume's write latency and written bytes; nor at the
    first checkpoint, which has no earlier one. The plain steps around them are not slow either."""
    sc = _scenario(service_url, "healthy", marks, to=to)
    d = sc.timeline.step_duration()
    assert min(d[c] for c in CHECKPOINTS) > 1.25 * max(d[c - 1] for c in CHECKPOINTS)  # the write is in the step
    answers = {s: ENGINE.attribute_step(db_conn, job=sc.job, step=s) for s in (*CHECKPOINTS, EVERY + 5, 2 * EVERY + 1)}
    wrong = {s: _answer(a) for s, a in answers.items()
             if a is None or a["slow"] or a["layer"] != "none" or a["rules"]["verdict"] != ids.VERDICT_UNDER_BAR}
    assert not wrong, wrong  # every step judged, so that a failure names all the wrong ones


@pytest.mark.parametrize("marks", MARKS)
def test_volume_write_signal_ends_with_the_write(service_url: str, db_conn: psycopg.Connection, marks: Marks) -> None:
    """Rule: a volume's write signals name it at the step they rose in only: the plain steps after a
    slow checkpoint (no write, the volume idle again) are not slow and not blamed on the volume."""
    sc, f = _slow_local(service_url, marks)
    after = range(SLOW + 1, SLOW + EVERY)
    assert all(sc.truth[s].slow is False for s in after)
    answers = {s: ENGINE.attribute_step(db_conn, job=sc.job, step=s) for s in after}
    wrong = {s: _answer(a) for s, a in answers.items() if a is None or a["slow"] or a["component"] == f.component}
    assert not wrong, wrong


def test_verdict_checkpoint_bar_learns_no_extra_from_a_window_opened_inside_a_fault() -> None:
    """Rule verdict.checkpoint_bar: the engine's window (history_steps before the step) can open inside
    a slow fault, whose steps are then its first "healthy" ones; a checkpoint step there runs under
    that median, and its negative "extra" made every later checkpoint step of the job slow (the fabric
    lab: baselines of -0.3 to -0.5 s). Such a step teaches nothing; a slow write is still slow."""
    for seed in (3, 4, 5, 6):
        rng = np.random.default_rng(seed)
        n = 120
        d = 0.1 * (1 + rng.normal(0, 0.05, n))
        d[:8] = 1.0 * (1 + rng.normal(0, 0.05, 8))  # the window opens inside a fault's 1-s steps
        ckpt = np.zeros(n, bool)
        ckpt[4::5] = True
        d[ckpt] += 0.02  # a quick checkpoint write
        d[104] += 0.1  # ...one of them slow
        b = compute_baselines(d, np.full(n, 0.03), ckpt, np.where(ckpt, 0.02, 0.0))
        assert (b.base[ckpt][3:] > 0.1).all(), b.base[ckpt]
        assert [int(i) for i in np.flatnonzero(ckpt & b.slow)] == [104], seed
