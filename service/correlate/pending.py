"""The engine's work over many steps: the steps listing, the background pass over steps not judged
yet, restating stored answers that later steps changed, and the per-job report. Each reads
judge_step's stored verdicts (AttributionEngine.judge_step) and never re-derives them."""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any, Protocol

import pandas as pd

from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.around import slow_around
from fabricscope.service.correlate.case import JobTopo, _baselines_for, _iso
from fabricscope.service.correlate.constants import SEQ_LOOKAHEAD_STEPS, EngineConfig
from fabricscope.service.correlate.episode import restate_unknown
from fabricscope.service.correlate.records import Attribution, StepRow
from fabricscope.service.correlate.report import summarize


class Engine(Protocol):
    """What these passes ask of the engine (AttributionEngine)."""

    config: EngineConfig

    def _job_topo(self, conn: Any, job: str) -> JobTopo: ...

    def _step_summaries(self, conn: Any, job: str, lo: int, hi: int, n_ranks: int) -> pd.DataFrame: ...

    def attribute_step(self, conn: Any, *, job: str, step: int, store: bool = True) -> Attribution | None: ...


def list_steps(
    engine: Engine,
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
    ranks, _, _ = engine._job_topo(conn, job)
    summ = engine._step_summaries(
        conn, job, rng[0] - engine.config.history_steps, rng[1] + SEQ_LOOKAHEAD_STEPS, len(ranks)
    )
    bl = _baselines_for(summ, engine.config)
    judged = q.stored_verdicts(q.stored_attributions(conn, job=job, lo=rng[0], hi=rng[1], answers=False))
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


def process_pending(engine: Engine, conn: Any, *, job: str | None = None, limit: int | None = None) -> int:
    """Attribute (and store) steps that have no attribution yet and whose data is in."""
    cfg = engine.config
    limit = cfg.pending_limit if limit is None else limit
    done = 0
    for j in [job] if job else q.job_names(conn):
        last = q.last_attributed_step(conn, job=j)
        rows = q.unattributed_steps(conn, job=j, after=-1 if last is None else last - cfg.history_steps)
        if not rows:
            continue
        ranks, topo, _ = engine._job_topo(conn, j)
        top_step = q.last_step(conn, job=j)
        nics = [s for s, r in topo.role.items() if r == "nic"][: cfg.horizon_probe_nics]
        horizon = q.telemetry_horizon(conn, sources=nics) if nics else None
        now = time.time()
        judged: list[int] = []
        for step, start, end, n in rows:
            complete = n >= len(ranks) or (top_step is not None and step <= top_step - cfg.final_lag_steps)
            # the step's telemetry window (its span and its pad) is in once a NIC sample is past it
            telemetry_in = (
                horizon is None or horizon >= end + cfg.window_pad(end - start) or end < now - cfg.telemetry_stale_s
            )
            if not (complete and telemetry_in):
                break  # later steps wait too: baselines are built in order
            engine.attribute_step(conn, job=j, step=step, store=True)
            judged.append(step)
            done += 1
            if done >= limit:
                break
        if judged:
            done += restate(engine, conn, job=j, lo=judged[0] - SEQ_LOOKAHEAD_STEPS, hi=judged[-1])
        if done >= limit:
            return done
    return done


def restate(engine: Engine, conn: Any, *, job: str, lo: int, hi: int) -> int:
    """Re-attribute the stored steps in [lo, hi) whose slow flag the steps since changed: a
    shift proven only now began earlier (its onset is marked back), or a segment's end is now
    proven (the steps after it are healthy). Steps before `lo` were stored with their whole
    look-ahead already. Returns how many were re-attributed."""
    ranks, _, _ = engine._job_topo(conn, job)
    summ = engine._step_summaries(conn, job, lo - engine.config.history_steps, hi + SEQ_LOOKAHEAD_STEPS, len(ranks))
    bl = _baselines_for(summ, engine.config)
    steps = summ["step"].astype(int)
    now = dict(zip(steps, bl.slow, strict=True))
    rows = q.stored_attributions(conn, job=job, lo=lo, hi=hi)
    verdicts = {s: v for s, v in q.stored_verdicts(rows).items() if s < hi}
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
        near += [x for x in [slow_around(bl, summ, at[s], engine.config.fill_gap_steps)] if x is not None]
        return any(
            any(answer.get(a) is not None and answer.get(a) == answer.get(b) for a in left for b in right)
            for left, right in near
        )

    changed += [s for s, slow in sorted(stored.items()) if not slow and s in at and s not in changed and inside(s)]
    for s in changed:
        engine.attribute_step(conn, job=job, step=s, store=True)
    return len(changed)


def job_report(
    engine: Engine, conn: Any, *, job: str, from_ts: datetime | None = None, to_ts: datetime | None = None
) -> dict[str, Any]:
    """Time lost per layer and per component over a time range, worst first (attributes the
    range's steps that have no stored attribution yet)."""
    rng = q.step_range(conn, job=job, from_ts=from_ts, to_ts=to_ts)
    if rng is not None:
        have = q.attributed_steps(conn, job=job, lo=rng[0], hi=rng[1])
        for s in q.step_numbers(conn, job=job, lo=rng[0], hi=rng[1]):
            if s not in have:
                engine.attribute_step(conn, job=job, step=s, store=True)
    rows = [] if rng is None else q.stored_attributions(conn, job=job, lo=rng[0], hi=rng[1])
    return summarize(job=job, from_ts=from_ts, to_ts=to_ts, rows=rows)
