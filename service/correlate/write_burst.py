"""Rule baseline.write_burst: which steps of a job that marks none of its checkpoints wrote one.

A job that posts no `checkpoint` events and records no checkpoint phase still writes its checkpoints,
and the write shows in its volumes' written bytes: a step during which the job's volumes took a burst
of writes far over what its ordinary steps write is a checkpoint step. It is then judged by the
checkpoint bar (against the job's earlier checkpoint steps, the ordinary steps' bar as its floor), and
the time its ranks spent outside their recorded phases is its write (decompose.unmarked_write), so a
slow writer is a checkpoint straggler whose written volume can be named, as for a job that marks them.
A job that marks any checkpoint in the steps judged, by events or by phase, is read as it marks them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.cache import LruCache
from fabricscope.service.correlate.constants import CKPT_WRITE_BURST, EngineConfig
from fabricscope.service.correlate.localize import Topo
from fabricscope.service.correlate.rules import ids


def unmarked_checkpoints(
    conn: Any, summ: pd.DataFrame, topo: Topo, cfg: EngineConfig, written_cache: JobWritten | None = None
) -> np.ndarray:
    """For each row of `summ` (the job's step summaries), whether it is a checkpoint step that the job
    did not mark (write_bursts). `written_cache`: the written bytes of steps read before, kept once their
    telemetry is final (telemetry_stale_s after their end): a step is read once, not once per judgement
    of every step whose history holds it."""
    none = np.zeros(len(summ), bool)
    if cfg.off(ids.BASELINE_WRITE_BURST) or not len(summ) or topo.checkpoint_volumes:
        return none
    if bool((summ["ckpt_max"].fillna(0) > 0).any()):
        return none
    volumes = sorted(v for v, role in topo.role.items() if role == "volume")
    if not volumes:
        return none
    steps = summ["step"].to_numpy(int)
    starts = summ["start"].to_numpy(float)
    ends = starts + summ["dur"].to_numpy(float)
    known = written_cache.get_many(list(steps)) if written_cache is not None else {}
    written = np.array([known.get(s, np.nan) for s in steps], float)
    todo = np.isnan(written)
    if todo.any():
        rises = q.step_writes(conn, volumes=volumes, ws=float(starts[todo].min()), we=float(ends[todo].max()))
        written[todo] = spread_rises(rises, starts[todo], ends[todo])
        if written_cache is not None:
            final = todo & (ends < time.time() - cfg.telemetry_stale_s)
            written_cache.put_many({int(s): float(w) for s, w in zip(steps[final], written[final], strict=True)})
    return write_bursts(written, summ["dur"].to_numpy(float))


@dataclass(frozen=True)
class JobWritten:
    """One job's view of the engine's written-bytes cache (keyed by database, job and step)."""

    cache: LruCache[tuple[str, str, int], float]
    db: str
    job: str

    def get_many(self, steps: list[int]) -> dict[int, float]:
        got = self.cache.get_many([(self.db, self.job, int(s)) for s in steps])
        return {k[2]: v for k, v in got.items()}

    def put_many(self, written: dict[int, float]) -> None:
        self.cache.update({(self.db, self.job, s): w for s, w in written.items()})


def write_bursts(written: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """Checkpoint steps by their written bytes: steps over CKPT_WRITE_BURST times the median step's
    (any write, where the median step writes nothing) show a write; of a run of such steps side by side,
    the one that took longest wrote it. A volume's sample dates its rise at the sample's end and its
    bytes are shared among the steps its interval overlaps, so a write that ends near its step's end
    shows in the next step too, which did not take the write's time."""
    usual = float(np.median(written)) if len(written) else 0.0
    burst = (written > 0) & (written > CKPT_WRITE_BURST * usual)
    out = np.zeros(len(written), bool)
    k = 0
    while k < len(written):
        if not burst[k]:
            k += 1
            continue
        end = k
        while end + 1 < len(written) and burst[end + 1]:
            end += 1
        out[k + int(np.nanargmax(np.nan_to_num(duration[k : end + 1], nan=-np.inf)))] = True
        k = end + 1
    return out


def spread_rises(rises: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Bytes written in each window [starts[k], ends[k]] from `rises` (rows: a sample's end, its
    interval in seconds, bytes a second over it): each sample's bytes are shared among the windows its
    interval overlaps, by overlap. Windows are a job's steps, in order (their starts increase); a
    sample's interval spans a few of them at most, so the work is rows x that span, not rows x windows
    (a long job's listing has tens of thousands of steps and as many log-write samples)."""
    out = np.zeros(len(starts))
    if not len(rises) or not len(starts):
        return out
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    t, dt, rate = rises[:, 0], rises[:, 1], rises[:, 2]
    first = np.maximum(np.searchsorted(s, t - dt, side="right") - 1, 0)  # the window the interval starts in
    last = np.searchsorted(s, t, side="left") - 1  # the last window starting before its end
    # a window that started earlier may still be open (ranks' medians overlap a little): one back
    first = np.maximum(first - 1, 0)
    acc = np.zeros(len(s))
    for off in range(int(np.max(last - first, initial=-1)) + 1):
        k = first + off
        on = k <= last
        kk = k[on]
        overlap = np.clip(np.minimum(e[kk], t[on]) - np.maximum(s[kk], t[on] - dt[on]), 0.0, None)
        np.add.at(acc, kk, rate[on] * overlap)
    out[order] = acc
    return out
