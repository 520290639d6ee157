"""Per-rank decomposition of one step and straggler detection, from durations only.

A rank's step splits into local work (data, compute, optimizer, checkpoint) and collectives
(transfer + waiting for the others). In a synchronous collective the last rank to arrive waits
least, so the rank with the most local work is the one everyone waited for. Only durations
measured on one host's clock are used (end - start of the same rank), never cross-host
timestamps, so clock skew between hosts changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fabricscope.service.correlate.constants import (
    CKPT_MIN_Z,
    CKPT_SPREAD_SHARE,
    HOST_LEVEL_SHARE,
    MAD_TO_SIGMA,
    MEMBER_SHARE,
    MIN_EXCESS_S,
    MIN_Z,
    WORK_MAD_FLOOR_REL,
    WORK_MAD_FLOOR_S,
)

PHASE_COLUMNS = {"compute": "compute", "data": "data", "checkpoint": "ckpt", "optimizer": "opt"}  # phase -> column
PHASES = tuple(PHASE_COLUMNS)
# A step's rank rows (queries.rank_rows' steps) and their decomposition, read on the first call and
# kept for the rest of the request (engine._rank_frame)
RankRows = Callable[[], tuple[pd.DataFrame, pd.DataFrame]]


@dataclass
class Straggler:
    phase: str  # one of PHASES
    host_level: bool  # most ranks of one host are slow together (host, not one GPU)
    rank: int
    host: str
    gpu: str | None
    value_s: float  # the phase time of the worst rank
    peer_s: float  # the peers' median of that phase
    excess_s: float
    z: float
    members: list[int]


def decompose(steps: pd.DataFrame, coll: pd.DataFrame) -> pd.DataFrame:
    """`steps`: rank, dur, data, fb, opt, ckpt (+ placement, + comm_summed: each rank's collective
    seconds from its summaries, queries.rank_rows); `coll`: rank, seq, duration_s.
    Missing collective rows are imputed with that collective's median over ranks, so a lost row
    does not make a rank look like it did more local work; so is a rank without a full summary, with
    the ranks' median."""
    df = steps.copy()
    df["comm"] = 0.0
    if "comm_summed" in df:  # every rank's own summed time (bounded detail): the records are a sample
        summed = df.pop("comm_summed").astype(float)
        df["comm"] = summed.fillna(summed.median()).fillna(0.0)
    elif len(coll):
        ranks = df["rank"].to_numpy()
        ri = np.searchsorted(np.sort(ranks), coll["rank"].to_numpy())
        order = np.argsort(ranks)
        known = (ri < len(ranks)) & (np.sort(ranks)[np.minimum(ri, len(ranks) - 1)] == coll["rank"].to_numpy())
        seqs, si = np.unique(coll["seq"].to_numpy()[known], return_inverse=True)
        m = np.full((len(ranks), len(seqs)), np.nan)
        m[order[ri[known]], si] = coll["duration_s"].to_numpy(float)[known]
        with np.errstate(all="ignore"):
            med = np.nanmedian(m, axis=0) if len(seqs) else np.zeros(0)
        m = np.where(np.isnan(m), med[None, :], m)
        df["comm"] = np.nan_to_num(np.nansum(m, axis=1))
    for c in ("data", "opt", "ckpt"):
        df[c] = df[c].fillna(0.0)
    df["work"] = df["dur"] - df["comm"]
    df["compute"] = (df["work"] - df["data"] - df["opt"] - df["ckpt"]).clip(lower=0.0)
    return df


def is_checkpoint(row: Any) -> bool:
    """Whether a step summary row (engine._step_summaries) is a checkpoint step: one its job marked
    (a checkpoint phase or events), or one its volumes' write burst showed (write_burst.py)."""
    return bool(row["ckpt_max"] > 0) or bool(row.get("unmarked", False))


def unmarked_write(df: pd.DataFrame) -> pd.DataFrame:
    """`df` (decompose's) at a checkpoint step its job did not mark: the time each rank spent outside its
    recorded phases (local work less data, forward/backward and optimizer) is its write, the `ckpt`
    phase. Unchanged where a rank recorded no forward/backward: its unphased time is its compute too."""
    if "fb" not in df or not df["fb"].notna().any():
        return df
    df = df.copy()
    has = df["fb"].notna()
    write = (df["work"] - df["data"] - df["fb"].fillna(0.0) - df["opt"]).clip(lower=0.0)
    df.loc[has, "ckpt"] = write[has]
    df["compute"] = (df["work"] - df["data"] - df["opt"] - df["ckpt"]).clip(lower=0.0)
    return df


def _spread(x: np.ndarray, floor: float) -> tuple[float, float]:
    """The median of `x` and its spread (a MAD sigma, never under `floor`)."""
    med = float(np.median(x))
    return med, max(MAD_TO_SIGMA * float(np.median(np.abs(x - med))), floor)


def _work_floor(work: np.ndarray) -> float:
    return max(WORK_MAD_FLOOR_REL * float(np.median(work)), WORK_MAD_FLOOR_S)


def _z(x: np.ndarray, v: float, floor: float) -> tuple[float, float]:
    med, sigma = _spread(x, floor)
    return med, (v - med) / sigma


def find_straggler(df: pd.DataFrame) -> Straggler | None:
    """The rank (or host) whose local work everyone waited for, or None when work is uniform."""
    if len(df) < 3:
        return None
    st = _straggler(df, df["work"].to_numpy(), PHASE_COLUMNS)
    if st is None and bool((df["ckpt"] > 0).any()):
        # At a checkpoint step every rank's local work holds its host's write, whose spread across
        # hosts (a few % of a long write) can hide a loader's or a GPU's excess of the same size.
        # That excess made the others wait in the collectives before the write, so it is judged on
        # the work besides the write (the write itself: above, and checkpoint_straggler).
        st = _straggler(
            df, (df["work"] - df["ckpt"]).to_numpy(), {p: c for p, c in PHASE_COLUMNS.items() if p != "checkpoint"}
        )
    return st


def _straggler(df: pd.DataFrame, work: np.ndarray, cols: dict[str, str]) -> Straggler | None:
    i = int(np.argmax(work))
    med, z = _z(work, work[i], _work_floor(work))
    if z < MIN_Z or work[i] - med < MIN_EXCESS_S:
        return None
    vals = {p: df[c].to_numpy() for p, c in cols.items()}
    excess = {p: float(v[i] - np.median(v)) for p, v in vals.items()}
    phase = max(excess, key=lambda p: excess[p])
    ex = vals[phase] - np.median(vals[phase])
    members = np.flatnonzero(ex >= MEMBER_SHARE * ex[i])
    hosts = df["host"].to_numpy()
    host = str(hosts[i])
    on_host = int((hosts == host).sum())
    host_level = (
        len(members) >= 2 and bool((hosts[members] == host).all()) and len(members) >= HOST_LEVEL_SHARE * on_host
    )
    gpu = df["gpu"].iloc[i]
    return Straggler(
        phase,
        host_level,
        int(df["rank"].iloc[i]),
        host,
        None if pd.isna(gpu) else str(gpu),
        float(vals[phase][i]),
        float(np.median(vals[phase])),
        float(ex[i]),
        float(z),
        [int(df["rank"].iloc[m]) for m in members],
    )


def straggler_loss(df: pd.DataFrame, st: Straggler) -> float:
    """Seconds the ranks waited for `st` beyond what the next-slowest rank (not one of its members)
    would have cost them: in a synchronous step, what the straggler added to the step, measured on
    the ranks' own clocks and free of the step time's noise (its collectives' transfer, say)."""
    work = df["work"].to_numpy(float)
    others = ~np.isin(df["rank"].to_numpy(), st.members)
    if not others.any() or not np.isfinite(work).all():
        return 0.0
    return max(float(work[df["rank"].to_numpy() == st.rank].max() - work[others].max()), 0.0)


def checkpoint_straggler(df: pd.DataFrame, hosts: set[str]) -> Straggler | None:
    """At a checkpoint step with no straggler at MIN_Z: the host of `hosts` (those with a volume the
    job's checkpoint events name) whose ranks all wrote longer than the others, by CKPT_MIN_Z, and
    whose ranks the others waited for (its median local work is the highest). A throttled local
    volume adds a fifth to a 0.8-s write, 4 sigmas of the write's own spread across hosts; that
    alone is weak, but every rank of one host agreeing, the collective wait after it and the step
    over its own baseline (the caller's borderline test) together are not noise."""
    if len(df) < 3 or not hosts or "host" not in df:
        return None
    ck = df["ckpt"].to_numpy(float)
    host_of = df["host"].to_numpy()
    if not np.isin(host_of, list(hosts)).any() or float(np.median(ck)) <= 0:
        return None
    per_host = df.assign(_ck=ck).groupby("host")[["_ck", "work"]].median()
    host = str(per_host.loc[per_host.index.isin(list(hosts)), "_ck"].idxmax())
    on = host_of == host
    # The others' spread is that of 7-63 hosts' writes, too few for a steady MAD (healthy writes of 8
    # hosts with a 4 % spread gave one at 3.9 "sigmas" of their MAD): never under the checkpoint
    # spread the baseline allows (CKPT_SPREAD_SHARE of the write).
    floor = max(CKPT_SPREAD_SHARE * float(np.median(ck)), WORK_MAD_FLOOR_S)
    med, z = _z(ck[~on], float(np.median(ck[on])), floor)
    excess = float(np.median(ck[on])) - med
    if z < CKPT_MIN_Z or excess < MIN_EXCESS_S or str(per_host["work"].idxmax()) != host:
        return None
    members = np.flatnonzero(on & (ck - med >= MEMBER_SHARE * excess))
    if len(members) < HOST_LEVEL_SHARE * int(on.sum()):
        return None
    i = int(members[np.argmax(ck[members])])
    return Straggler(
        "checkpoint",
        True,
        int(df["rank"].iloc[i]),
        host,
        None,
        float(np.median(ck[on])),
        med,
        excess,
        float(z),
        [int(df["rank"].iloc[m]) for m in members],
    )


def work_on(df: pd.DataFrame, host: str, gpu: str | None = None) -> tuple[float, float, float] | None:
    """The most local work of the ranks on `host` (on its `gpu` when given), the median over all
    ranks, and the ranks' spread (a MAD sigma, floored as the straggler test's); None when no rank of
    the step is there. What a GPU's or a host's fault would have cost the step shows here first."""
    if len(df) < 3 or "host" not in df:
        return None
    on = df["host"].to_numpy() == host
    if gpu is not None:
        on &= df["gpu"].astype(str).to_numpy() == gpu
    if not on.any():
        return None
    work = df["work"].to_numpy(float)
    med, sigma = _spread(work, _work_floor(work))
    return float(work[on].max()), med, sigma
