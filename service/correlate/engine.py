"""Why was this step slow? baseline -> slow step -> decompose -> straggler vs fabric -> localize -> evidence.

`AttributionEngine` holds the caches and the configuration; one instance is shared by the API's
request threads and the background scheduler (service/api/main.py puts it on `app.state.engine`).
Its public methods take a psycopg 3 connection and keyword-only arguments; the output is docs/API.md's
attribution. All SQL is in queries.py, the cause logic in causes.py, the numbers in constants.py; a
step under the bar that was slowed all the same in corroborate.py, a flagged step whose cause did not
slow it in untimed.py.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.around import slow_around
from fabricscope.service.correlate.baseline import Baselines, compute_baselines, time_lost, work_lost
from fabricscope.service.correlate.cache import LruCache
from fabricscope.service.correlate.causes import (
    CauseDraft,
    LoaderLoss,
    WorkLoss,
    combine_causes,
    first_timed,
    gpu_state_first,
    has_state_row,
    merge_same,
    net_cause,
    rank_causes,
    unknown_cause,
    with_straggler_timing,
    work_cause,
)
from fabricscope.service.correlate.constants import (
    DEFAULT_CONFIG,
    DEFAULT_SEQ,
    FAINT_REL,
    SEQ_LOOKAHEAD_STEPS,
    EngineConfig,
)
from fabricscope.service.correlate.corroborate import CauseKey, Probes, Sides, step_row
from fabricscope.service.correlate.decompose import (
    RankRows,
    Straggler,
    checkpoint_straggler,
    decompose,
    find_straggler,
    straggler_loss,
)
from fabricscope.service.correlate.device_probe import (
    gpu_or_network,
    origin_cover,
    unreported_gpu,
    with_device_evidence,
)
from fabricscope.service.correlate.direction import follow_backpressure
from fabricscope.service.correlate.episode import from_episode, restate_unknown
from fabricscope.service.correlate.invariants import violations, with_kind_layer
from fabricscope.service.correlate.localize import (
    FLOORS,
    WRITE_SIGNALS,
    Topo,
    build_topo,
    candidates,
    finish_scores,
    series_groups,
)
from fabricscope.service.correlate.promote import hidden_slow
from fabricscope.service.correlate.records import Attribution, StepRow
from fabricscope.service.correlate.report import summarize
from fabricscope.service.correlate.rules import ids
from fabricscope.service.correlate.rules.trace import decide, noted
from fabricscope.service.correlate.untimed import untimed_row
from fabricscope.service.correlate.window import Scoring
from fabricscope.service.observability.metrics import ENGINE_INVARIANT_VIOLATIONS, attribution_timer

log = logging.getLogger(__name__)
ONSET_KIND = "onset"  # the evidence row of an onset step that showed nothing of its own
_SUMMARY_COLS = ["step", "n", "dur", "start", "ckpt_max", "ckpt_med", "transfer", "data"]
JobTopo = tuple[pd.DataFrame, Topo, pd.DataFrame]  # the job's ranks, its topology, its series' peer groups


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


def _rank_frame(conn: Any, *, job: str, step: int, placement: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The step's rank rows and their decomposition (decompose.RankRows); `placement`: the job's
    ranks (queries.job_ranks) as the topology cache holds them."""
    steps_df, coll = q.rank_rows(conn, job=job, step=step, placement=placement)
    return steps_df, decompose(steps_df, coll) if len(steps_df) else steps_df


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
    vols = [v for v, r in topo.role.items() if r == "volume" and v not in topo.checkpoint_volumes]
    wrote = q.volumes_written(conn, volumes=vols, ws=ws, we=we) if vols else []
    return replace(topo, checkpoint_volumes=topo.checkpoint_volumes | frozenset(wrote)) if wrote else topo


def _baselines_for(df: pd.DataFrame, cfg: EngineConfig = DEFAULT_CONFIG) -> Baselines:
    seq = replace(DEFAULT_SEQ, enabled=False) if cfg.off(ids.VERDICT_SEQUENTIAL) else DEFAULT_SEQ
    return compute_baselines(
        df["dur"].to_numpy(float),
        df["transfer"].to_numpy(float),
        (df["ckpt_max"].fillna(0) > 0).to_numpy(),
        df["ckpt_med"].fillna(0).to_numpy(float),
        seq=seq,
        data=df["data"].to_numpy(float),
        ckpt_max=df["ckpt_max"].fillna(0).to_numpy(float),
    )


@dataclass(frozen=True)
class _StepView:
    """One summary row as _explain reads it: the row, its baselines (total and transfer), start and
    duration (seconds), where its own-history window ends (None: at the step) and its loaders' loss."""

    row: Any
    base_t: float
    base: float
    start: float
    d: float
    past: float | None
    loaders: LoaderLoss | None


@dataclass
class _StepCase:
    """One step being judged (AttributionEngine.judge_step), with what every rule reads: its row `i`
    of the job's step summaries, their baselines, the job's topology and its rank rows (read once,
    when a rule asks)."""

    engine: AttributionEngine
    conn: Any
    job: str
    i: int
    summ: pd.DataFrame
    bl: Baselines
    job_topo: JobTopo
    ranked: RankRows

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


class AttributionEngine:
    """Attributes slow steps; thread-safe (its caches are bounded and locked)."""

    def __init__(self, config: EngineConfig = DEFAULT_CONFIG) -> None:
        self.config = config
        # Keyed by database too: tests and the benchmark point one process at several databases.
        # Each entry: (what it was built from, when that was last checked, the job's topology, when it
        # was built). Past topo_ttl_s the stamp is checked again (one cheap query) and the entry rebuilt
        # only when its inputs changed: a 4,096-rank job's scoring set takes seconds to rebuild, and
        # rebuilding it every topo_ttl_s put those seconds into one attribution in every few.
        self._topo: LruCache[tuple[str, str], tuple[tuple[Any, ...], float, JobTopo, float]] = LruCache(
            max_size=config.topo_cache_size
        )
        # The scoring arrays of each cached `meta` frame (queries.scoring_arrays), by identity.
        self._arrays: LruCache[int, tuple[pd.DataFrame, Scoring]] = LruCache(max_size=config.topo_cache_size)
        # Only final steps go in (they no longer change), so no TTL.
        self._summaries: LruCache[tuple[str, str, int], tuple[Any, ...] | None] = LruCache(
            max_size=config.summary_cache_size
        )

    # -- data access with caches ---------------------------------------------------------------

    def _job_topo(self, conn: Any, job: str) -> JobTopo:
        key = (_db(conn), job)
        hit = self._topo.get(key)
        now = time.monotonic()
        if hit is not None and now - hit[1] < self.config.topo_ttl_s:
            return hit[2]
        if hit is not None and now - hit[3] >= self.config.topo_rebuild_s:
            hit = None  # whatever a stamp cannot see (a series committed out of id order) is seen now
        stamp = q.topology_stamp(conn, job=job)
        if hit is not None and hit[0] == stamp:
            self._topo.put(key, (stamp, now, hit[2], hit[3]))
            return hit[2]
        ranks = q.job_ranks(conn, job=job)
        hosts = sorted(set(ranks["host"])) if len(ranks) else []
        topo = build_topo(ranks, q.links(conn), q.host_volumes(conn, hosts=hosts), q.checkpoint_sources(conn, job=job))
        # Something changed, maybe not for this job (a series or a volume of another job's host): the
        # scoring set, the costly part, is kept when this job's topology is the same and none of its
        # sources has a new series since the cached one was built.
        if (
            hit is not None
            and hit[2][1] == topo
            and hit[0][q.STAMP_SERIES] is not None
            and not q.has_series_after(
                conn, sources=topo.sources, metrics=list(FLOORS), after=int(hit[0][q.STAMP_SERIES])
            )
        ):
            built, built_at = (ranks, hit[2][1], hit[2][2]), hit[3]
        else:
            meta = series_groups(q.series_meta(conn, sources=topo.sources, metrics=list(FLOORS)), topo)
            built, built_at = (ranks, topo, meta), now
            if not meta.empty:  # with the topology they depend on, not in the first slow step's time
                self._scoring_arrays(meta)
        self._topo.put(key, (stamp, now, built, built_at))
        return built

    def _scoring_arrays(self, meta: pd.DataFrame) -> Scoring:
        hit = self._arrays.get(id(meta))
        if hit is not None and hit[0] is meta:  # the same frame (an id is reused only once it is freed)
            return hit[1]
        arrays = q.scoring_arrays(meta)
        self._arrays.put(id(meta), (meta, arrays))
        return arrays

    def _step_summaries(self, conn: Any, job: str, lo: int, hi: int, n_ranks: int) -> pd.DataFrame:
        """Per-step summaries of [lo, hi]; complete past steps come from the cache."""
        db, cfg = _db(conn), self.config
        want = range(max(lo, 0), hi + 1)
        cached = self._summaries.get_many([(db, job, s) for s in want])
        rows = {s: cached[(db, job, s)] for s in want if (db, job, s) in cached}
        missing = [s for s in want if s not in rows]
        if missing:
            fresh = q.step_summaries(conn, job=job, lo=missing[0], hi=missing[-1])
            top = int(fresh["step"].max()) if len(fresh) else -1
            got = {int(r[0]): tuple(r) for r in fresh.itertuples(index=False)}
            final: dict[tuple[str, str, int], tuple[Any, ...] | None] = {}
            for s in missing:
                r = got.get(s)
                rows[s] = r
                settled = s <= top - cfg.final_lag_steps and (r is None or r[1] >= cfg.final_rank_share * n_ranks)
                if (r is not None and n_ranks and r[1] >= n_ranks) or settled:
                    final[(db, job, s)] = r
            self._summaries.update(final)
        df = pd.DataFrame([r for r in rows.values() if r is not None], columns=_SUMMARY_COLS)
        df = df.sort_values("step").reset_index(drop=True)
        for c in _SUMMARY_COLS[1:]:
            df[c] = pd.to_numeric(df[c], errors="coerce")
        return df

    def _window(self, conn: Any, meta: pd.DataFrame, ws: float, we: float) -> tuple[pd.DataFrame, float]:
        """The series whose window value in [ws, we] stands out from their peers, their coarse edge
        samples at their even spread (queries.outliers, edges=False); telemetry coverage."""
        if meta.empty:
            return pd.DataFrame(), 0.0
        out, have = q.outliers(conn, meta=meta, ws=ws, we=we, arrays=self._scoring_arrays(meta), edges=False)
        return out, min(1.0, have / max(int(meta["net"].sum()), 1))

    def _scored(
        self,
        conn: Any,
        meta: pd.DataFrame,
        out: pd.DataFrame,
        ws: float,
        we: float,
        past: float | None = None,
        edges: bool = True,
    ) -> pd.DataFrame:
        """`out` (_window) scored against own history (the own_history_s before `past`, default ws);
        `edges`: less what coarse counters' edge samples owe to a change outside [ws, we]
        (queries.without_edge_changes), as queries.outliers reads them by default."""
        if meta.empty:
            return out
        if edges:
            out = q.without_edge_changes(conn, out, self._scoring_arrays(meta), ws=ws, we=we)
        he = (ws if past is None else past) - self.config.own_history_gap_s
        hist = q.history(conn, ids=[int(i) for i in out["series_id"]], hs=he - self.config.own_history_s, he=he)
        return finish_scores(out, meta, hist)

    # -- attribution ----------------------------------------------------------------------------

    def attribute_step(self, conn: Any, *, job: str, step: int, store: bool = True) -> Attribution | None:
        """The attribution of one step (docs/API.md), or None when the step does not exist."""
        with attribution_timer() as timing:
            out = self._attribute(conn, job=job, step=step, store=store, borrow=True)
            if out is not None:
                timing["layer"] = out["layer"]
        if out is not None:
            self._check(conn, job=job, answer=out)
        return out

    def _check(self, conn: Any, *, job: str, answer: Attribution) -> None:
        """Log and count the invariants `answer` breaks (invariants.py): an engine bug, reported with
        the rules that decided the answer; the answer is still returned (a 500 would hide it)."""
        _, topo, _ = self._job_topo(conn, job)
        for invariant, how in violations(answer, topo.role):
            ENGINE_INVARIANT_VIOLATIONS.labels(invariant).inc()
            log.error(
                "engine invariant %s broken: job %s step %s: %s (rules %s)",
                invariant,
                job,
                answer["step"],
                how,
                answer.get("rules"),
            )

    def _attribute(self, conn: Any, *, job: str, step: int, store: bool, borrow: bool) -> Attribution | None:
        case = self._case(conn, job=job, step=step)
        if case is None:
            return None
        out = case.blank()
        self.judge_step(case, out, borrow=borrow)
        if store:
            q.store_attribution(conn, job=job, attribution=out)
        return out

    def _case(self, conn: Any, *, job: str, step: int) -> _StepCase | None:
        """What judging `step` reads: its job's topology, its summaries and their baselines (None: no
        such step). Later steps that exist already are read too: a small sustained shift is proven a
        few steps after its onset, and a GET of an old step gets the final answer (baseline.py)."""
        cfg = self.config
        job_topo = self._job_topo(conn, job)
        ranks = job_topo[0]
        summ = self._step_summaries(conn, job, step - cfg.history_steps, step + SEQ_LOOKAHEAD_STEPS, len(ranks))
        at = summ.index[summ["step"] == step]
        if len(at) == 0:
            return None
        bl = _baselines_for(summ, cfg)
        i = int(at[0])
        # the step's rank rows, read and decomposed once for every rule that asks (the straggler rules,
        # each corroboration's explain, the untimed rule): at 4,096 ranks a read is ~25-30 ms
        ranked = cache(lambda: _rank_frame(conn, job=job, step=step, placement=ranks))
        return _StepCase(self, conn, job, i, summ, bl, job_topo, ranked)

    def judge_step(self, case: _StepCase, out: Attribution, *, borrow: bool) -> str:
        """The one place that decides whether a step is slow: fills `out` (case.blank()) with the
        verdict, its cause and the rules that decided them, and returns the verdict's rule id (also in
        out["rules"]). In order: too little history; under the bar, unless a promotion rule holds
        (promote.py); over it (the per-step bar, a checkpoint step's own bar, or a proven shift), unless
        a demotion rule says a step only the sequential test flagged showed nothing of its own.
        `borrow`: the step may ask its neighbours' answers (not when it is itself a neighbour asked)."""
        if math.isnan(case.base):
            out["confidence"] = 0.0  # not enough history to judge
            decide(out, ids.VERDICT_HISTORY)
        elif not out["slow"]:
            self._under_bar(case, out, borrow=borrow)
        else:
            self._over_bar(case, out, borrow=borrow)
        return out["rules"]["verdict"]

    def _under_bar(self, case: _StepCase, out: Attribution, *, borrow: bool) -> None:
        conn, job, summ, cfg = case.conn, case.job, case.summ, self.config
        # a neighbour's answer is asked by several rules (and by each step of a long gap): once
        seen: dict[int, Attribution | None] = {}

        def neighbour(s: int) -> Attribution | None:
            if s not in seen:
                seen[s] = self._attribute(conn, job=job, step=s, store=False, borrow=False)
            return seen[s]

        def state_at(k: int, component: str) -> bool:
            # step row `k`'s own window (as a corroborated step's) shows `component`'s own state
            at = int(summ["step"].iat[k])
            into: Attribution = {**out, "step": at, "slow": True, "evidence": [], "causes": []}
            case.explain_row(
                k, into, cache(lambda: _rank_frame(conn, job=job, step=at, placement=case.ranks)), corroborating=True
            )
            return has_state_row(into["evidence"], component)

        probes = Probes(
            explain=case.explain,
            between=lambda c, sides: _between(neighbour, step=case.step, cause=c, around=sides),
            # the step's rank rows are read for the rules that need them only
            straggler=cache(lambda: _straggler(case.ranked)),
            cover=lambda gpu, span: origin_cover(conn, gpu, span, cfg),
            state_at=state_at,
        )
        promoted = hidden_slow(
            out, bl=case.bl, summ=summ, i=case.i, cfg=cfg, host_of=case.topo.host_of, probes=probes, borrow=borrow
        )
        if promoted is None:
            self._healthy(out, case)
            decide(out, ids.VERDICT_UNDER_BAR)
            return
        decide(out, promoted)
        for e in out["evidence"]:
            if e.get("kind") == "corroborated":
                e["rule"] = promoted

    def _over_bar(self, case: _StepCase, out: Attribution, *, borrow: bool) -> None:
        cfg, bl, i, row = self.config, case.bl, case.i, case.row
        # an onset only the sequential test found is the least sure step of its shift: only what
        # its own span shows counts, not the next step's first second (the pad) where the fault
        # may have begun, nor a signal's aftermath from before it
        case.explain(out, own_span=bool(bl.onset[i]))
        decide(
            out,
            (ids.VERDICT_CHECKPOINT_BAR if row["ckpt_max"] > 0 else ids.VERDICT_BAR)
            if bl.step_slow[i]
            else ids.VERDICT_SEQUENTIAL,
        )
        weak = out["layer"] == "unknown" or out["confidence"] < cfg.episode_weak_confidence
        # only the sequential test put this step in the shift, and its onset is the least sure
        # step of it (Baselines.onset): with nothing of its own to show (or only a weak
        # candidate), it is not slow, and it does not borrow its episode's cause
        unsure_onset = bool(bl.onset[i]) and weak and not cfg.off(ids.DEMOTE_UNSURE_ONSET)
        if not unsure_onset and borrow and weak and bl.episode[i] >= 0 and not cfg.off(ids.CAUSE_EPISODE):
            conn, job = case.conn, case.job
            from_episode(
                conn,
                out,
                job=job,
                summ=case.summ,
                bl=bl,
                i=i,
                cfg=cfg,
                attribute=lambda s: self._attribute(conn, job=job, step=s, store=False, borrow=False),
            )
        # ...nor is a later step of it that ran at the job's level (under the faint bar) when
        # neither it nor its episode names a cause: nothing says it lost time (a +0.3 %
        # step of a shift whose onset, a noisy step before a fault, was healthy by the rule
        # above)
        unnamed_level = (
            cfg.unnamed_level_healthy
            and not cfg.off(ids.DEMOTE_UNNAMED_LEVEL)
            and bool(bl.unproven[i])
            and out["layer"] == "unknown"
            and case.d - float(bl.centre[i]) < FAINT_REL * case.base
        )
        if unsure_onset or unnamed_level:
            self._healthy(out, case)
            out["evidence"] = [step_row("", case.d, case.base, float(bl.sigma[i]), ONSET_KIND)]
            decide(out, ids.DEMOTE_UNSURE_ONSET if unsure_onset else ids.DEMOTE_UNNAMED_LEVEL)
        untimed = (
            None
            if cfg.off(ids.DEMOTE_UNTIMED)
            else first_timed(
                out,
                lambda o: untimed_row(case.ranked, o, bl, i, row=row, topo=case.topo, cfg=cfg),
                yield_to_next=not cfg.off(ids.ADJUST_NEXT_TIMED),
            )
        )
        if untimed is not None:
            # only the sequential test put this step in the shift (a noisy step beside a fault,
            # whose coarse samples cover the fault's first or last seconds too), and the loss its
            # cause would have cost is not in the phase that cause slows: not slow
            self._healthy(out, case)
            out["evidence"] = [untimed]
            decide(out, ids.DEMOTE_UNTIMED)

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
    ) -> None:
        """Fill `out` (a slow step) with its causes: split the lost time into local work and network.
        `corroborating` (a step under the bar, `corroborate.corroborated`): telemetry of the step's own window
        only, without the aftermath of a signal in the seconds before it (AFTERMATH_S: that explains a
        step known to be slow, it does not show that a step under the bar was slowed); and at a
        checkpoint step a host that wrote its checkpoint slowly is a straggler at a lower bar
        (decompose.checkpoint_straggler). Not for a slow step: a checkpoint's spread across hosts has
        a 3.5-sigma host often enough that it took the cause of slow shared-volume and link steps."""
        cfg = self.config
        ranks, topo, meta = job_topo
        row, base_t, base, start, d = view.row, view.base_t, view.base, view.start, view.d
        past, loaders = view.past, view.loaders
        # a step its fault slowed that its noise put under the baseline (a proven shift's, or one
        # between its slow steps) lost time that cannot be measured: none, never a negative loss
        lost = max(d - base, 0.0)
        checkpoint = bool(row["ckpt_max"] > 0)
        steps_df, per_rank = ranked()
        st = _waited_for(per_rank, topo, checkpoint=checkpoint, corroborating=corroborating)
        transfer = float(row["transfer"]) if pd.notna(row["transfer"]) else base_t
        e_comm = time_lost(transfer, base_t)
        waited = straggler_loss(per_rank, st) if st is not None and cfg.measured_work_loss else 0.0
        e_work = work_lost(d, base, transfer, base_t, waited)
        total = e_comm + e_work or 1.0
        pad = 0.0 if own_span else min(max(cfg.window_pad_share * d, cfg.window_pad_min_s), cfg.window_pad_max_s)

        raw, coverage = self._window(conn, meta, start, start + d + pad)

        def telemetry(edges: bool) -> pd.DataFrame:
            ev = self._scored(conn, meta, raw, start, start + d + pad, past, edges=edges)
            if (corroborating or own_span) and "aftermath" in ev:
                ev = ev[~ev["aftermath"].fillna(False).astype(bool)]
            if not checkpoint and len(ev):
                ev = ev[~ev["metric"].isin(WRITE_SIGNALS)]
            if not len(ev):
                return ev
            found = candidates(ev, topo)
            return found if cfg.off(ids.CAUSE_BACKPRESSURE) else follow_backpressure(found, topo)

        ev = telemetry(True)
        conf_t = min(1.0, len(steps_df) / max(len(ranks), 1)) if len(ranks) else cfg.unplaced_timing_confidence
        win = (start, start + d + pad)
        if checkpoint and not cfg.off(ids.CAUSE_WRITTEN_VOLUME):
            topo = _with_written(conn, topo, start, start + d)
        if loaders is not None and topo.shared_volumes:
            loaders = replace(
                loaders, volumes=tuple(q.volumes_read(conn, volumes=list(topo.shared_volumes), ws=start, we=start + d))
            )
        data = steps_df["data"].dropna() if "data" in steps_df else pd.Series(dtype=float)
        data_s = float(data.median()) if len(data) else None  # None: the job records no phases
        ckpt_s = float(row["ckpt_med"]) if checkpoint and pd.notna(row["ckpt_med"]) else None

        def work(ev: pd.DataFrame) -> CauseDraft:
            cause = work_cause(st, ev, topo, conf_t, cfg, WorkLoss(data_s, e_work, loaders, ckpt_s))
            if not cfg.off(ids.ADJUST_DEVICE_EVIDENCE):
                cause = with_device_evidence(conn, cause, topo, win, cfg)
            if st is not None or cause["layer"] != "unknown" or cfg.off(ids.CAUSE_UNREPORTED_GPU):
                return cause
            return unreported_gpu(conn, cause, _unreported_gpus(ranks, steps_df), win, cfg)

        def causes_of(ev: pd.DataFrame) -> list[CauseDraft]:
            return combine_causes(
                lost,
                e_work / total,
                e_comm / total,
                lambda: work(ev),
                lambda: gpu_or_network(
                    conn,
                    net_cause(ev, coverage, cfg),
                    topo,
                    win,
                    cfg,
                    scan=e_comm / total >= cfg.min_share and not cfg.off(ids.CAUSE_RING_GPU),
                ),
                cfg,
            )

        causes = causes_of(ev)
        if (
            all(c["layer"] == "unknown" for c in causes)
            and not corroborating
            and cfg.edge_spread_fallback
            and not cfg.off(ids.ADJUST_EDGE_SPREAD)
        ):
            # a coarse counter's edge sample read as a change outside the window (edges.py) is the
            # lower estimate, the right one when something else slowed the step; a slow step that
            # nothing else explains is read at what the sample itself says, its even spread (a
            # one-step burst of retransmits in a 10-s host sample whose next sample holds a second
            # fault's burst reads as that fault's onset after the step); the window's samples
            # are read once (_window), only their scoring again
            spread = causes_of(telemetry(False))
            if spread and any(c["layer"] != "unknown" for c in spread):
                spread = [noted(c, ids.ADJUST_EDGE_SPREAD) for c in spread]
            causes = spread or causes
        self._answer(
            out, causes or [{**unknown_cause(cfg.unknown_confidence), "lost_s": lost}], lost=lost, st=st, topo=topo
        )

    def _answer(
        self, out: Attribution, causes: list[CauseDraft], *, lost: float, st: Straggler | None, topo: Topo
    ) -> None:
        """`out` answered with `causes` (a slow step's, unranked): ordered, adjusted, capped."""
        cfg = self.config
        if not cfg.off(ids.ADJUST_LAYER_FROM_KIND):
            causes = [with_kind_layer(c, topo) for c in causes]
        causes = rank_causes(merge_same(with_straggler_timing(causes, st, cfg)))
        if not cfg.off(ids.ADJUST_GPU_STATE_FIRST):
            causes = gpu_state_first(causes)
        top = causes[0]
        out.update(
            {
                "layer": top["layer"],
                "component": top["component"],
                "confidence": self._capped(top["confidence"]),
                "lost_s": round(lost, 6),
                "evidence": [e for c in causes for e in c["evidence"]],
                "causes": [
                    {
                        "layer": c["layer"],
                        "component": c["component"],
                        "lost_s": round(c.get("lost_s", 0.0), 6),
                        "confidence": self._capped(c["confidence"]),
                        "rule": c.get("rule", ids.CAUSE_UNKNOWN),
                    }
                    for c in causes
                ],
                "rules": {
                    "verdict": out.get("rules", {}).get("verdict", ""),
                    "cause": top.get("rule", ids.CAUSE_UNKNOWN),
                    "adjust": list(top.get("adjust", [])),
                },
            }
        )

    def _healthy(self, out: Attribution, case: _StepCase) -> None:
        """`out` as a step that is not slow, surer the further under the bar it is."""
        cfg = self.config
        d, base, thr = case.d, case.base, float(case.bl.threshold[case.i])
        below = min(1.0, max(0.0, (thr - d) / max(thr - base, 1e-9)))
        out.update(
            {
                "slow": False,
                "layer": "none",
                "component": None,
                "lost_s": 0.0,
                "evidence": [],
                "causes": [],
                "confidence": round(cfg.healthy_confidence_base + cfg.healthy_confidence_span * below, 3),
            }
        )

    def _capped(self, confidence: float) -> float:
        return round(float(min(max(confidence, 0.0), self.config.max_confidence)), 3)

    # -- listings and background work -----------------------------------------------------------

    def list_steps(
        self,
        conn: Any,
        *,
        job: str,
        from_ts: datetime | None = None,
        to_ts: datetime | None = None,
        slow_only: bool = False,
    ) -> list[StepRow]:
        """docs/API.md steps listing: step, start, duration_s, baseline_s, slow, verdict. A judged step
        (its attribution stored) is listed with the verdict judge_step gave it and that verdict's rule;
        one not judged yet with the baseline's flag and no rule (`verdict: None`): the background pass
        judges each step as its data comes in, and restates a stored one when later steps change it."""
        rng = q.step_range(conn, job=job, from_ts=from_ts, to_ts=to_ts)
        if rng is None:
            return []
        ranks, _, _ = self._job_topo(conn, job)
        summ = self._step_summaries(
            conn, job, rng[0] - self.config.history_steps, rng[1] + SEQ_LOOKAHEAD_STEPS, len(ranks)
        )
        bl = _baselines_for(summ, self.config)
        judged = q.stored_verdicts(conn, job=job, lo=rng[0], hi=rng[1])
        lo = from_ts.timestamp() if from_ts else -math.inf
        hi = to_ts.timestamp() if to_ts else math.inf
        out: list[StepRow] = []
        for j, (s, start, d) in enumerate(zip(summ["step"], summ["start"], summ["dur"], strict=False)):
            verdict = judged.get(int(s))
            slow = verdict[0] if verdict is not None else bool(bl.slow[j])
            if not rng[0] <= s <= rng[1] or not lo <= start <= hi or (slow_only and not slow):
                continue
            b = bl.base[j]
            out.append(
                {
                    "step": int(s),
                    "start": _iso(float(start)),
                    "duration_s": round(float(d), 6),
                    "baseline_s": None if math.isnan(b) else round(float(b), 6),
                    "slow": slow,
                    "verdict": None if verdict is None else verdict[1],
                }
            )
        return out

    def process_pending(self, conn: Any, *, job: str | None = None, limit: int | None = None) -> int:
        """Attribute (and store) steps that have no attribution yet and whose data is in."""
        cfg = self.config
        limit = cfg.pending_limit if limit is None else limit
        done = 0
        for j in [job] if job else q.job_names(conn):
            last = q.last_attributed_step(conn, job=j)
            rows = q.unattributed_steps(conn, job=j, after=-1 if last is None else last - cfg.history_steps)
            if not rows:
                continue
            ranks, topo, _ = self._job_topo(conn, j)
            top_step = q.last_step(conn, job=j)
            nics = [s for s, r in topo.role.items() if r == "nic"][: cfg.horizon_probe_nics]
            horizon = q.telemetry_horizon(conn, sources=nics) if nics else None
            now = time.time()
            judged: list[int] = []
            for step, end, n in rows:
                complete = n >= len(ranks) or (top_step is not None and step <= top_step - cfg.final_lag_steps)
                telemetry_in = (
                    horizon is None or horizon >= end + cfg.telemetry_margin_s or end < now - cfg.telemetry_stale_s
                )
                if not (complete and telemetry_in):
                    break  # later steps wait too: baselines are built in order
                self.attribute_step(conn, job=j, step=step, store=True)
                judged.append(step)
                done += 1
                if done >= limit:
                    break
            if judged:
                done += self._restate(conn, job=j, lo=judged[0] - SEQ_LOOKAHEAD_STEPS, hi=judged[-1])
            if done >= limit:
                return done
        return done

    def _restate(self, conn: Any, *, job: str, lo: int, hi: int) -> int:
        """Re-attribute the stored steps in [lo, hi) whose slow flag the steps since changed: a
        shift proven only now began earlier (its onset is marked back), or a segment's end is now
        proven (the steps after it are healthy). Steps before `lo` were stored with their whole
        look-ahead already. Returns how many were re-attributed."""
        ranks, _, _ = self._job_topo(conn, job)
        summ = self._step_summaries(conn, job, lo - self.config.history_steps, hi + SEQ_LOOKAHEAD_STEPS, len(ranks))
        bl = _baselines_for(summ, self.config)
        steps = summ["step"].astype(int)
        now = dict(zip(steps, bl.slow, strict=True))
        rows = q.stored_attributions(conn, job=job, lo=lo, hi=hi)
        verdicts = {s: v for s, v in q.stored_verdicts(conn, job=job, lo=lo, hi=hi).items() if s < hi}
        stored = {s: slow for s, (slow, _) in verdicts.items()}
        # a step a promotion rule made slow (its telemetry: borderline, or inside a fault its noise
        # hid) keeps its verdict, which later steps do not change; so does one a demotion rule made
        # healthy while only the sequential test flags it (it showed nothing of its own, or not its
        # network cause's loss): judge_step's verdict is re-judged only when what decided it changed
        unproven = dict(zip(steps, bl.unproven, strict=True))
        changed = [
            s
            for s, (slow, rule) in sorted(verdicts.items())
            if s in now
            and bool(now[s]) != slow
            and not (slow and rule.startswith("promote."))
            and not (not slow and unproven[s] and rule.startswith("demote."))
        ]
        # ...or answered `unknown` before a step of its episode named a cause (episode.py)
        changed += [
            s for s in restate_unknown(rows, dict(zip(steps, bl.episode, strict=True))) if s < hi and s not in changed
        ]
        # ...or stored healthy before the slow steps either side of it (the next one, or the nearest
        # within fill_gap_steps) were judged to have one cause (_between: it may be inside that fault)
        answer = {int(r[0]): (r[3], r[4]) for r in rows if r[1]}
        at = {int(s): k for k, s in enumerate(steps)}
        weak = dict(zip(steps, bl.faint | bl.near_slow, strict=True))

        def inside(s: int) -> bool:
            near = [([s - 1], [s + 1])] if weak.get(s) else []
            near += [x for x in [slow_around(bl, summ, at[s], self.config.fill_gap_steps)] if x is not None]
            return any(
                any(answer.get(a) is not None and answer.get(a) == answer.get(b) for a in left for b in right)
                for left, right in near
            )

        changed += [s for s, slow in sorted(stored.items()) if not slow and s in at and s not in changed and inside(s)]
        for s in changed:
            self.attribute_step(conn, job=job, step=s, store=True)
        return len(changed)

    def job_report(
        self, conn: Any, *, job: str, from_ts: datetime | None = None, to_ts: datetime | None = None
    ) -> dict[str, Any]:
        """Time lost per layer and per component over a time range, worst first (attributes the
        range's steps that have no stored attribution yet)."""
        rng = q.step_range(conn, job=job, from_ts=from_ts, to_ts=to_ts)
        if rng is not None:
            have = q.attributed_steps(conn, job=job, lo=rng[0], hi=rng[1])
            for s in q.step_numbers(conn, job=job, lo=rng[0], hi=rng[1]):
                if s not in have:
                    self.attribute_step(conn, job=job, step=s, store=True)
        rows = [] if rng is None else q.stored_attributions(conn, job=job, lo=rng[0], hi=rng[1])
        return summarize(job=job, from_ts=from_ts, to_ts=to_ts, rows=rows)

    def clear_caches(self) -> None:
        """Forget cached topologies and step summaries (after a topology change, in tests)."""
        self._topo.clear()
        self._arrays.clear()
        self._summaries.clear()
