"""One step being judged (AttributionEngine.judge_step) and the pure helpers the engine's rules share:
what a step's row, its baselines and the job's topology say, read once per judgement."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import pandas as pd

from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.baseline import Baselines, compute_baselines
from fabricscope.service.correlate.causes import (
    LoaderLoss,
)
from fabricscope.service.correlate.constants import (
    DEFAULT_CONFIG,
    DEFAULT_SEQ,
    EngineConfig,
)
from fabricscope.service.correlate.corroborate import CauseKey, Sides
from fabricscope.service.correlate.decompose import (
    RankRows,
    Straggler,
    checkpoint_straggler,
    decompose,
    find_straggler,
    straggler_loss,
    unmarked_write,
)
from fabricscope.service.correlate.localize import (
    Topo,
)
from fabricscope.service.correlate.records import Attribution
from fabricscope.service.correlate.rules import ids

JobTopo = tuple[pd.DataFrame, Topo, pd.DataFrame]  # the job's ranks, its topology, its series' peer groups


class Explains(Protocol):
    """What a _StepCase asks of the engine (AttributionEngine): its configuration and its explain."""

    config: EngineConfig

    def _explain(
        self,
        conn: Any,
        out: Attribution,
        *,
        ranked: RankRows,
        job_topo: JobTopo,
        view: _StepView,
        corroborating: bool = False,
        own_span: bool = False,
    ) -> None: ...


def _db(conn: Any) -> str:
    i = conn.info
    return f"{i.host}:{i.port}/{i.dbname}"


def _iso(ts: float | None) -> str | None:
    return None if ts is None or not math.isfinite(ts) else datetime.fromtimestamp(ts, UTC).isoformat()


def _loader_loss(bl: Baselines, i: int, row: Any) -> LoaderLoss | None:
    """Step `i`'s loaders' loss when its median data phase lost the time itself (Baselines.data_timing)."""
    if bl.data_base is None or bl.data_sigma is None or not bl.data_timing[i] or not pd.notna(row["data"]):
        return None
    return LoaderLoss(float(row["data"]), float(bl.data_base[i]), float(bl.data_sigma[i]))


def _unreported_gpus(ranks: pd.DataFrame, steps_df: pd.DataFrame) -> list[str]:
    """The GPUs (`host:gpu`) of the job's placed ranks that sent no record of the step."""
    if not len(ranks) or "gpu" not in ranks or "rank" not in steps_df:
        return []
    gone = ranks[~ranks["rank"].isin(steps_df["rank"]) & ranks["host"].notna() & ranks["gpu"].notna()]
    return sorted({f"{h}:{g}" for h, g in zip(gone["host"], gone["gpu"], strict=True)})


def _history_end(starts: np.ndarray, episode: np.ndarray, i: int, cfg: EngineConfig) -> float | None:
    """Where step `i`'s own-history window ends (None: at the step): before the earliest sustained
    episode that reaches into it. A minute into a fault, or just after it, the own_history_s before the
    step is the fault itself: the culprit's counters no longer stand out from it, while a victim's
    newest symptom does. Not past an episode that began over episode_history_max_s before the step."""
    lo = int(np.searchsorted(starts, starts[i] - cfg.own_history_s))
    eps = episode[lo : i + 1]
    eps = eps[eps >= 0]
    if not len(eps):
        return None
    k = int(eps.min())
    if k >= i or starts[i] - starts[k] > cfg.episode_history_max_s:
        return None
    return float(starts[k])


def _between(
    attribute: Callable[[int], Attribution | None], *, step: int, cause: CauseKey, around: Sides | None = None
) -> bool:
    """Whether the steps before and after `step` are both slow with `cause` as their answer
    (`attribute`: a step's answer, not borrowing in turn); `around` (around.slow_around, or one side:
    around.slow_beside): on each side it holds, the first of these steps that is slow."""
    for side in around or ([step - 1], [step + 1]):
        a = None
        for s in side:
            a = attribute(s)
            if a is not None and a["slow"]:
                break
        if a is None or not a["slow"] or (a["layer"], a["component"]) != cause:
            return False
    return True


def _rank_frame(
    conn: Any, *, job: str, step: int, placement: pd.DataFrame, unmarked: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The step's rank rows and their decomposition (decompose.RankRows); `placement`: the job's
    ranks (queries.job_ranks) as the topology cache holds them; `unmarked`: a checkpoint step its job
    did not mark (write_burst.py), whose unphased time is its write (decompose.unmarked_write)."""
    steps_df, coll = q.rank_rows(conn, job=job, step=step, placement=placement)
    if not len(steps_df):
        return steps_df, steps_df
    per_rank = decompose(steps_df, coll)
    return steps_df, unmarked_write(per_rank) if unmarked else per_rank


def _straggler(ranked: RankRows) -> tuple[Straggler, float] | None:
    """The straggler the step's ranks waited for and how much longer (seconds) than for the
    next-slowest rank (decompose.straggler_loss); None: none. Asked only for steps under every
    timing bar that corroborate.hidden_slow's straggler rules ask about."""
    steps_df, per_rank = ranked()
    if len(steps_df) < 3:
        return None
    st = find_straggler(per_rank)
    return None if st is None else (st, straggler_loss(per_rank, st))


def _waited_for(per_rank: pd.DataFrame, topo: Topo, *, checkpoint: bool, corroborating: bool) -> Straggler | None:
    """The straggler the step's ranks waited for (decompose.find_straggler), None: none. At a
    checkpoint step the ranks may have waited for another rank than the phase's outlier: one host's
    slow write outweighs a GPU's few-sigma compute, and a straggler no rank waited for is not the
    step's cause; while corroborating a checkpoint step, a host that wrote its checkpoint slowly is a
    straggler at a lower bar (decompose.checkpoint_straggler)."""
    if not len(per_rank):
        return None
    st = find_straggler(per_rank)
    if st is not None and checkpoint and straggler_loss(per_rank, st) <= 0.0:
        st = None
    if st is None and corroborating and topo.checkpoint_volumes and checkpoint:
        st = checkpoint_straggler(per_rank, {topo.host_of[v] for v in topo.checkpoint_volumes if v in topo.host_of})
    return st


def _with_written(conn: Any, topo: Topo, ws: float, we: float) -> Topo:
    """`topo` whose checkpoint volumes, at a checkpoint step, also hold the volumes written during it:
    which volume a checkpoint went to is learnt from what the job did (its events, when it posts
    them), and a job that only marks the phase, or writes to a storage system's volume every host
    shares, shows it in the written bytes alone."""
    # not on a host whose checkpoint volume the job's events name: they say which of its volumes (the
    # mount, or the disk under it, both written) took the checkpoint
    evented = {topo.host_of.get(v) for v in topo.checkpoint_volumes}
    vols = [v for v, r in topo.role.items() if r == "volume" and topo.host_of.get(v) not in evented]
    wrote = q.volumes_written(conn, volumes=vols, ws=ws, we=we) if vols else []
    return replace(topo, checkpoint_volumes=topo.checkpoint_volumes | frozenset(wrote)) if wrote else topo


def _baselines_for(df: pd.DataFrame, cfg: EngineConfig = DEFAULT_CONFIG) -> Baselines:
    seq = replace(DEFAULT_SEQ, enabled=False) if cfg.off(ids.VERDICT_SEQUENTIAL) else DEFAULT_SEQ
    # a checkpoint step its job did not mark (write_burst.py) has no measured write: NaN
    unmarked = df["unmarked"].to_numpy(bool) if "unmarked" in df else np.zeros(len(df), bool)
    ckpt_max = df["ckpt_max"].fillna(0).to_numpy(float)
    return compute_baselines(
        df["dur"].to_numpy(float),
        df["transfer"].to_numpy(float),
        (ckpt_max > 0) | unmarked,
        np.where(unmarked, np.nan, df["ckpt_med"].fillna(0).to_numpy(float)),
        seq=seq,
        data=df["data"].to_numpy(float),
        ckpt_max=np.where(unmarked, np.nan, ckpt_max),
    )


@dataclass(frozen=True)
class _StepView:
    """One summary row as _explain reads it: the row, its baselines (total and transfer), start and
    duration (seconds), where its own-history window ends (None: at the step) and its loaders' loss;
    `memo`: what _explain read for this row once, kept for the case's other drafts of it (every
    promotion rule drafts the step's answer anew)."""

    row: Any
    base_t: float
    base: float
    start: float
    d: float
    past: float | None
    loaders: LoaderLoss | None
    memo: dict[str, Any] = field(default_factory=dict)


@dataclass
class _StepCase:
    """One step being judged (AttributionEngine.judge_step), with what every rule reads: its row `i`
    of the job's step summaries, their baselines, the job's topology and its rank rows (read once,
    when a rule asks)."""

    engine: Explains
    conn: Any
    job: str
    i: int
    summ: pd.DataFrame
    bl: Baselines
    job_topo: JobTopo
    ranked: RankRows
    memos: dict[int, dict[str, Any]] = field(default_factory=dict)  # _StepView.memo of each row

    @property
    def row(self) -> Any:
        return self.summ.iloc[self.i]

    @property
    def step(self) -> int:
        return int(self.summ["step"].iat[self.i])

    @property
    def d(self) -> float:
        return float(self.row["dur"])

    @property
    def base(self) -> float:
        return float(self.bl.base[self.i])

    @property
    def ranks(self) -> pd.DataFrame:
        return self.job_topo[0]

    @property
    def topo(self) -> Topo:
        return self.job_topo[1]

    def blank(self) -> Attribution:
        """The step's answer before any rule: the baseline's flag, no cause."""
        base, start = self.base, float(self.row["start"])
        return {
            "step": self.step,
            "slow": bool(self.bl.slow[self.i]),
            "duration_s": round(self.d, 6),
            "baseline_s": None if math.isnan(base) else round(base, 6),
            "start": _iso(start),
            "layer": "none",
            "component": None,
            "confidence": 1.0,
            "lost_s": 0.0,
            "evidence": [],
            "causes": [],
        }

    def view(self, k: int) -> _StepView:
        r, bl = self.summ.iloc[k], self.bl
        past = _history_end(self.summ["start"].to_numpy(float), bl.episode, k, self.engine.config)
        return _StepView(
            r,
            float(bl.base_transfer[k]),
            float(bl.base[k]),
            float(r["start"]),
            float(r["dur"]),
            past,
            _loader_loss(bl, k, r),
            self.memos.setdefault(k, {}),
        )

    def explain_row(
        self, k: int, into: Attribution, rows: RankRows, corroborating: bool = False, own_span: bool = False
    ) -> None:
        self.engine._explain(
            self.conn,
            into,
            ranked=rows,
            job_topo=self.job_topo,
            view=self.view(k),
            corroborating=corroborating,
            own_span=own_span,
        )

    def explain(self, into: Attribution, corroborating: bool = False, own_span: bool = False) -> None:
        self.explain_row(self.i, into, self.ranked, corroborating, own_span)
