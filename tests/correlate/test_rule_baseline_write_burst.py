"""Rule baseline.write_burst: a job that marks none of its checkpoints (no events, no checkpoint phase)
still writes them, and its volumes' written bytes say which steps did (write_burst.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.case import _db
from fabricscope.service.correlate.constants import CKPT_WRITE_BURST, DEFAULT_CONFIG
from fabricscope.service.correlate.rules import ids
from fabricscope.service.correlate.write_burst import spread_rises, write_bursts
from tests.correlate.test_rule_checkpoint_class import CHECKPOINTS, _answer, _scenario

STEP = 2.0


def test_a_write_in_a_job_that_writes_nothing_else_is_a_checkpoint() -> None:
    written = np.zeros(30)
    written[[9, 19]] = 4e9
    assert list(np.flatnonzero(write_bursts(written, np.full(30, STEP)))) == [9, 19]


def test_the_steps_ordinary_writes_are_the_bar() -> None:
    """Logs and metrics every step (a few KB) are no checkpoint; a write over CKPT_WRITE_BURST times
    the median step's is, and one just under it is not."""
    written = np.full(30, 50e3)
    written[5] = 0.9 * CKPT_WRITE_BURST * 50e3
    written[12] = 3e9
    assert list(np.flatnonzero(write_bursts(written, np.full(30, STEP)))) == [12]


def test_a_write_that_spills_into_the_next_step_is_the_longer_steps() -> None:
    """A volume's sample dates its rise at its end and its interval spans two steps: the bytes show in
    the step after the write too (even the larger share), but the step that took the write's time wrote
    it."""
    written = np.zeros(20)
    written[[10, 11]] = [1.2e9, 2.8e9]
    duration = np.full(20, STEP)
    duration[10] = 2.9
    assert list(np.flatnonzero(write_bursts(written, duration))) == [10]


def test_rises_are_shared_among_the_steps_their_interval_overlaps() -> None:
    """Each sample's bytes go to the steps its interval overlaps, by overlap: the same as the plain sum
    over every (sample, step) pair, with steps of uneven length that overlap a little (ranks' medians)
    and samples 1-5 s apart, some before the first step or after the last."""
    rng = np.random.default_rng(3)
    d = rng.uniform(0.2, 3.0, 400)
    starts = np.concatenate(([100.0], 100.0 + np.cumsum(d)[:-1])) - rng.uniform(0, 0.05, 400)
    ends = starts + d
    t = np.sort(rng.uniform(95.0, float(ends[-1]) + 8.0, 3000))
    dt = rng.uniform(1.0, 5.0, 3000)
    rate = rng.exponential(1e6, 3000)
    naive = np.array([(rate * np.clip(np.minimum(e, t) - np.maximum(s, t - dt), 0, None)).sum()
                      for s, e in zip(starts, ends, strict=True)])
    got = spread_rises(np.column_stack((t, dt, rate)), starts, ends)
    assert np.allclose(got, naive, rtol=1e-9, atol=1e-3)
    assert spread_rises(np.zeros((0, 3)), starts, ends).sum() == 0


def test_no_write_no_checkpoint() -> None:
    assert not write_bursts(np.zeros(12), np.full(12, STEP)).any()


def test_off_the_unmarked_jobs_healthy_checkpoints_are_slow(service_url: str, db_conn: psycopg.Connection) -> None:
    """Without the rule, a job that marks nothing has its (healthy) checkpoint steps judged by the
    ordinary steps' bar, and each is slow; with it, each is judged by the checkpoint bar and none is.
    Their final written bytes are read once (kept by the engine)."""
    sc = _scenario(service_url, "healthy", "none", to="local")
    on = AttributionEngine()
    off = AttributionEngine(replace(DEFAULT_CONFIG, disabled=frozenset({ids.BASELINE_WRITE_BURST})))
    later = CHECKPOINTS[1:]  # the first checkpoint has no earlier one: it is its own example
    with_rule = {s: on.attribute_step(db_conn, job=sc.job, step=s, store=False) for s in later}
    without = {s: off.attribute_step(db_conn, job=sc.job, step=s, store=False) for s in later}
    shown = {s: _answer(a) for s, a in with_rule.items()}
    assert all(a is not None and not a["slow"] for a in with_rule.values()), shown
    assert all(a is not None and a["slow"] and a["rules"]["verdict"] == ids.VERDICT_BAR for a in without.values()), {
        s: _answer(a) for s, a in without.items()}
    keys = [(_db(db_conn), sc.job, s) for s in CHECKPOINTS]  # final (the run is in the past): kept
    assert len(on._written.get_many(keys)) == len(keys)
