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
from dataclasses import replace
from datetime import datetime
from functools import cache
from typing import Any

import pandas as pd

from fabricscope.service.correlate import pending
from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.baseline import time_lost, work_lost
from fabricscope.service.correlate.cache import LruCache
from fabricscope.service.correlate.case import (
    JobTopo,
    _baselines_for,
    _between,
    _db,
    _rank_frame,
    _StepCase,
    _StepView,
    _straggler,
    _unreported_gpus,
    _waited_for,
    _with_written,
)
from fabricscope.service.correlate.causes import (
    CauseDraft,
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
    FAINT_REL,
    SEQ_LOOKAHEAD_STEPS,
    EngineConfig,
)
from fabricscope.service.correlate.corroborate import Probes, step_row
from fabricscope.service.correlate.decompose import (
    RankRows,
    Straggler,
    is_checkpoint,
    straggler_loss,
)
from fabricscope.service.correlate.device_probe import (
    gpu_or_network,
    origin_cover,
    unreported_gpu,
    with_device_evidence,
)
from fabricscope.service.correlate.direction import follow_backpressure
from fabricscope.service.correlate.episode import from_episode
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
from fabricscope.service.correlate.rules import ids
from fabricscope.service.correlate.rules.trace import decide, noted
from fabricscope.service.correlate.untimed import untimed_row
from fabricscope.service.correlate.window import Scoring
from fabricscope.service.correlate.write_burst import JobWritten, unmarked_checkpoints
from fabricscope.service.observability.metrics import ENGINE_INVARIANT_VIOLATIONS, attribution_timer

log = logging.getLogger(__name__)
ONSET_KIND = "onset"  # the evidence row of an onset step that showed nothing of its own
_SUMMARY_COLS = ["step", "n", "dur", "start", "ckpt_max", "ckpt_med", "transfer", "data", "pending"]


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
        # Bytes written to a job's volumes per step (write_burst.py), once final.
        self._written: LruCache[tuple[str, str, int], float] = LruCache(max_size=config.summary_cache_size)

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
                # a step whose ranks' collective summaries are still on their way is read again
                if (r is not None and n_ranks and r[1] >= n_ranks and not r[8]) or settled:
                    final[(db, job, s)] = r
            self._summaries.update(final)
        df = pd.DataFrame([r for r in rows.values() if r is not None], columns=_SUMMARY_COLS)
        df = df.sort_values("step").reset_index(drop=True)
        for c in _SUMMARY_COLS[1:]:
            df[c] = pd.to_numeric(df[c], errors="coerce")
        # not cached with the rows: a step's volumes' samples may come after its last rank's record
        written = JobWritten(self._written, db, job)
        df["unmarked"] = unmarked_checkpoints(conn, df, self._job_topo(conn, job)[1], cfg, written)
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
        unmarked = bool(summ["unmarked"].iat[int(at[0])])
        ranked = cache(lambda: _rank_frame(conn, job=job, step=step, placement=ranks, unmarked=unmarked))
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
                k,
                into,
                cache(
                    lambda: _rank_frame(
                        conn, job=job, step=at, placement=case.ranks, unmarked=bool(summ["unmarked"].iat[k])
                    )
                ),
                corroborating=True,
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
            (ids.VERDICT_CHECKPOINT_BAR if is_checkpoint(row) else ids.VERDICT_BAR)
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
        checkpoint = is_checkpoint(row)
        steps_df, per_rank = ranked()
        st = _waited_for(per_rank, topo, checkpoint=checkpoint, corroborating=corroborating)
        transfer = float(row["transfer"]) if pd.notna(row["transfer"]) else base_t
        e_comm = time_lost(transfer, base_t)
        waited = straggler_loss(per_rank, st) if st is not None and cfg.measured_work_loss else 0.0
        e_work = work_lost(d, base, transfer, base_t, waited)
        total = e_comm + e_work or 1.0
        pad = 0.0 if own_span else cfg.window_pad(d)

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
            if "written" not in view.memo:
                view.memo["written"] = _with_written(conn, topo, start, start + d)
            topo = view.memo["written"]
        if loaders is not None and topo.shared_volumes:
            loaders = replace(
                loaders, volumes=tuple(q.volumes_read(conn, volumes=list(topo.shared_volumes), ws=start, we=start + d))
            )
        data = steps_df["data"].dropna() if "data" in steps_df else pd.Series(dtype=float)
        data_s = float(data.median()) if len(data) else None  # None: the job records no phases
        ckpt_s = float(row["ckpt_med"]) if checkpoint and pd.notna(row["ckpt_med"]) else None
        if checkpoint and row.get("unmarked", False) and len(per_rank):
            ckpt_s = float(per_rank["ckpt"].median())  # the ranks' unphased time (decompose.unmarked_write)

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
        """See pending.list_steps."""
        return pending.list_steps(self, conn, job=job, from_ts=from_ts, to_ts=to_ts, slow_only=slow_only)

    def process_pending(self, conn: Any, *, job: str | None = None, limit: int | None = None) -> int:
        """See pending.process_pending."""
        return pending.process_pending(self, conn, job=job, limit=limit)

    def _restate(self, conn: Any, *, job: str, lo: int, hi: int) -> int:
        """See pending.restate."""
        return pending.restate(self, conn, job=job, lo=lo, hi=hi)

    def job_report(
        self, conn: Any, *, job: str, from_ts: datetime | None = None, to_ts: datetime | None = None
    ) -> dict[str, Any]:
        """See pending.job_report."""
        return pending.job_report(self, conn, job=job, from_ts=from_ts, to_ts=to_ts)

    def clear_caches(self) -> None:
        """Forget cached topologies and step summaries (after a topology change, in tests)."""
        self._topo.clear()
        self._arrays.clear()
        self._summaries.clear()
        self._written.clear()
