"""Sending a generated scenario to a running service, as the end-to-end suites do."""

from __future__ import annotations

import numpy as np
import pandas as pd
import psycopg

from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.baseline import Baselines
from fabricscope.service.correlate.case import _baselines_for
from fabricscope.service.correlate.constants import DEFAULT_CONFIG
from fabricscope.service.simulate.generator import Scenario
from fabricscope.service.simulate.model import Timeline
from fabricscope.service.simulate.send import HttpSink, send_scenario


def post(url: str, sc: Scenario) -> Scenario:
    """Send `sc` through the service's ingest API at `url` and return it."""
    sink = HttpSink(url)
    try:
        send_scenario(sink, sc)
    finally:
        sink.close()
    return sc


def stored_summaries(conn: psycopg.Connection, job: str, hi: int) -> pd.DataFrame:
    """The stored per-step summaries of the job's steps 0..hi, their values as floats (as the engine
    reads them)."""
    summ = q.step_summaries(conn, job=job, lo=0, hi=hi)
    return summ.astype({c: float for c in summ.columns if c != "step"})


def stored_baselines(conn: psycopg.Connection, job: str, hi: int) -> tuple[Baselines, np.ndarray]:
    """The engine's baselines of the job's steps 0..hi from their stored summaries, and the steps'
    numbers (index i of the baselines is step steps[i])."""
    summ = stored_summaries(conn, job, hi)
    return _baselines_for(summ, DEFAULT_CONFIG), summ["step"].to_numpy(int)


def longer_step(tl: Timeline, step: int, by_s: float) -> None:
    """Every rank's compute in `step` takes `by_s` longer, alike (no straggler, nothing sampled): the
    steps before it move back by as much, so the steps after it (and a fault's telemetry there) keep
    their place."""
    for a in (tl.start, tl.end):
        a[:step] -= by_s
    tl.coll_start[:step] -= by_s
    tl.coll_end[:step] -= by_s
    tl.start[step] -= by_s
    tl.fb[step] += by_s


def longer_barrier(tl: Timeline, step: int, by_s: float, data_s: float = 0.0) -> None:
    """Every rank waits `by_s` longer at checkpoint step `step`'s barrier (a network stall outside
    the timed all-reduces) and reads its data `data_s` longer: the steps before it, and its own
    phases before the barrier, move back, so its end and everything after it (telemetry too) keep
    their place."""
    shift = by_s + data_s
    for a in (tl.start, tl.end, tl.coll_start, tl.coll_end):
        a[:step] -= shift
    tl.start[step] -= shift
    tl.data[step] += data_s
    tl.coll_start[step] -= by_s  # the barrier's start too: it lasts `by_s` longer
    tl.coll_end[step, :, :-1] -= by_s


def longer_write(tl: Timeline, step: int, by_s: float) -> None:
    """Every rank's checkpoint write in checkpoint step `step` takes `by_s` longer, alike (every host's
    shard; the volumes' sampled writes stay as they were): the steps before it, and its own phases
    before the write, move back, so the write's end, the barrier after it and everything after them
    (telemetry too) keep their place."""
    for a in (tl.start, tl.end, tl.coll_start, tl.coll_end):
        a[:step] -= by_s
    tl.start[step] -= by_s
    tl.coll_start[step, :, :-1] -= by_s  # the step's all-reduces, before the write
    tl.coll_end[step, :, :-1] -= by_s
    tl.ckpt[step] += by_s
