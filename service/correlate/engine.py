"""Why was this step slow? baseline -> slow step -> decompose -> straggler vs fabric -> localize -> evidence.

Public, keyword-only, psycopg 3 connection passed in:
`attribute_step`, `list_steps`, `job_report`, `process_pending`. Output is docs/API.md's attribution.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.baseline import compute_baselines
from fabricscope.service.correlate.decompose import Straggler, decompose, find_straggler
from fabricscope.service.correlate.localize import (
    FLOORS,
    build_topo,
    candidates,
    finish_scores,
    rank_candidates,
    series_groups,
)
from fabricscope.service.observability.metrics import attribution_timer

HISTORY_STEPS = 160  # steps of history fetched to rebuild the baseline
HIST_S = 90.0  # seconds of a source's own history it is compared with
NET_LAYERS = ("nic", "link", "fabric")
MIN_SHARE = 0.15  # a cause explaining less than this share of the lost time is not listed
TOPO_TTL_S = 10.0
_summary_cache: dict[tuple[str, str], dict[int, tuple[Any, ...] | None]] = {}
_topo_cache: dict[tuple[str, str], tuple[float, Any]] = {}


def _db(conn: Any) -> str:
    i = conn.info
    return f"{i.host}:{i.port}/{i.dbname}"


def _iso(ts: float | None) -> str | None:
    return None if ts is None or not math.isfinite(ts) else datetime.fromtimestamp(ts, UTC).isoformat()


# -- data access with caches -------------------------------------------------------------------

def _job_topo(conn: Any, job: str) -> tuple[pd.DataFrame, Any, pd.DataFrame]:
    key = (_db(conn), job)
    hit = _topo_cache.get(key)
    if hit and time.monotonic() - hit[0] < TOPO_TTL_S:
        return hit[1]
    ranks = q.job_ranks(conn, job=job)
    hosts = sorted(set(ranks["host"])) if len(ranks) else []
    topo = build_topo(ranks, q.links(conn), q.host_volumes(conn, hosts=hosts))
    meta = series_groups(q.series_meta(conn, sources=topo.sources, metrics=list(FLOORS)), topo)
    _topo_cache[key] = (time.monotonic(), (ranks, topo, meta))
    return ranks, topo, meta


_SUMMARY_COLS = ["step", "n", "dur", "start", "ckpt_max", "ckpt_med", "transfer"]


def _summaries(conn: Any, job: str, lo: int, hi: int, n_ranks: int) -> pd.DataFrame:
    """Per-step summaries; complete past steps are cached (they no longer change)."""
    cache = _summary_cache.setdefault((_db(conn), job), {})
    want = range(max(lo, 0), hi + 1)
    missing = [s for s in want if s not in cache]
    rows: dict[int, tuple[Any, ...] | None] = {s: cache[s] for s in want if s in cache}
    if missing:
        fresh = q.step_summaries(conn, job=job, lo=missing[0], hi=missing[-1])
        top = int(fresh["step"].max()) if len(fresh) else -1
        got = {int(r[0]): tuple(r) for r in fresh.itertuples(index=False)}
        for s in missing:
            r = got.get(s)
            rows[s] = r
            final = s <= top - 2 and (r is None or r[1] >= 0.9 * n_ranks)
            if (r is not None and n_ranks and r[1] >= n_ranks) or final:
                cache[s] = r
        if len(cache) > 20000:
            for s in sorted(cache)[:5000]:
                del cache[s]
    df = pd.DataFrame([r for r in rows.values() if r is not None], columns=_SUMMARY_COLS)
    df = df.sort_values("step").reset_index(drop=True)
    for c in _SUMMARY_COLS[1:]:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def _baselines_for(df: pd.DataFrame) -> Any:
    return compute_baselines(df["dur"].to_numpy(float), df["transfer"].to_numpy(float),
                             (df["ckpt_max"].fillna(0) > 0).to_numpy(), df["ckpt_med"].fillna(0).to_numpy(float))


# -- causes ------------------------------------------------------------------------------------

def _telemetry(conn: Any, meta: pd.DataFrame, ws: float, we: float) -> tuple[pd.DataFrame, float]:
    """Anomalous series in [ws, we] scored against peers and own history; telemetry coverage."""
    if meta.empty:
        return pd.DataFrame(), 0.0
    out, have = q.outliers(conn, meta=meta, ws=ws, we=we)
    coverage = min(1.0, have / max(int(meta["net"].sum()), 1))
    hist = q.history(conn, ids=[int(i) for i in out["series_id"]], hs=ws - HIST_S, he=ws - 0.5)
    return finish_scores(out, meta, hist), coverage


def _ev_rows(ev: pd.DataFrame, layer: str, component: str, n: int = 4) -> list[dict[str, Any]]:
    sub = ev[(ev["layer"] == layer) & (ev["component"] == component)].nlargest(n, "score")
    out = []
    for r in sub.itertuples(index=False):
        row = {"source": r.source, "metric": r.metric, "value": round(float(r.cur), 6),
               "baseline": round(float(r.baseline), 6), "score": round(float(r.score), 2)}
        labels = json.loads(r.labels) if isinstance(r.labels, str) else {}
        if labels:
            row["labels"] = labels
        row["unit"] = "value" if r.metric.endswith("_seconds") else "per_second"
        out.append(row)
    return out


_PHASE_METRIC = {"compute": "compute_seconds", "data": "data_seconds", "checkpoint": "checkpoint_seconds",
                 "optimizer": "optimizer_seconds"}


def _work_cause(st: Straggler | None, ev: pd.DataFrame, topo: Any, conf_t: float) -> dict[str, Any]:
    """Layer and component for excess local work (the thing everyone waited for)."""
    storage = rank_candidates(ev, ("storage",)) if len(ev) else pd.DataFrame()
    if st is None:
        if len(storage):
            top = storage.iloc[0]
            return {"layer": "storage", "component": top["component"], "confidence": 0.5, "evidence":
                    _ev_rows(ev, "storage", top["component"])}
        return {"layer": "unknown", "component": None, "confidence": 0.2, "evidence": []}
    timing = {"source": f"{st.host}:{st.gpu}" if (st.gpu and not st.host_level) else st.host,
              "metric": _PHASE_METRIC[st.phase], "value": round(st.value_s, 6),
              "baseline": round(st.peer_s, 6), "score": round(min(st.z, 1e6), 2), "rank": st.rank,
              "unit": "seconds", "kind": "timing"}
    strength = 0.55 + 0.4 * (1 - math.exp(-st.z / 20.0))
    if st.phase in ("data", "checkpoint"):
        mine = storage[storage["component"].map(topo.host_of).eq(st.host)] if len(storage) else storage
        if len(mine):
            comp = mine.iloc[0]["component"]
            return {"layer": "storage", "component": comp, "confidence": strength * conf_t,
                    "evidence": [timing] + _ev_rows(ev, "storage", comp)}
        if st.phase == "checkpoint":
            vols = [s for s, h in topo.host_of.items() if h == st.host and topo.role.get(s) == "volume"]
            comp = next((v for v in vols if "ckpt" in v or "checkpoint" in v), vols[0] if vols else st.host)
            return {"layer": "storage", "component": comp, "confidence": 0.6 * strength * conf_t,
                    "evidence": [timing]}
        return {"layer": "host", "component": st.host, "confidence": strength * conf_t, "evidence": [timing]}
    if st.host_level:
        return {"layer": "host", "component": st.host, "confidence": strength * conf_t, "evidence": [timing]}
    return {"layer": "compute", "component": timing["source"], "confidence": strength * conf_t,
            "evidence": [timing]}


def _net_cause(ev: pd.DataFrame, coverage: float) -> dict[str, Any]:
    cands = rank_candidates(ev, NET_LAYERS) if len(ev) else pd.DataFrame()
    if cands.empty:
        return {"layer": "unknown", "component": None, "confidence": 0.2 * max(coverage, 0.2), "evidence": []}
    top = cands.iloc[0]
    second = float(cands.iloc[1]["total"]) if len(cands) > 1 else 0.0
    margin = 1.0 - second / float(top["total"])
    conf = (0.5 + 0.45 * margin) * (1 - math.exp(-float(top["total"]) / 4.0)) * (0.5 + 0.5 * float(top["origin"]))
    return {"layer": top["layer"], "component": top["component"], "confidence": conf * coverage,
            "evidence": _ev_rows(ev, top["layer"], top["component"])}


# -- public API --------------------------------------------------------------------------------

def attribute_step(conn: Any, *, job: str, step: int, store: bool = True) -> dict[str, Any] | None:
    """The attribution of one step (docs/API.md), or None when the step does not exist."""
    with attribution_timer() as timing:
        out = _attribute(conn, job=job, step=step, store=store)
        if out is not None:
            timing["layer"] = out["layer"]
    return out


def _attribute(conn: Any, *, job: str, step: int, store: bool) -> dict[str, Any] | None:
    ranks, topo, meta = _job_topo(conn, job)
    summ = _summaries(conn, job, step - HISTORY_STEPS, step, len(ranks))
    if summ.empty or int(summ["step"].iloc[-1]) != step:
        return None
    bl = _baselines_for(summ)
    i = len(summ) - 1
    row = summ.iloc[i]
    d, start = float(row["dur"]), float(row["start"])
    base, thr = float(bl.base[i]), float(bl.threshold[i])
    out: dict[str, Any] = {"step": step, "slow": bool(bl.slow[i]), "duration_s": round(d, 6),
                           "baseline_s": None if math.isnan(base) else round(base, 6), "start": _iso(start),
                           "layer": "none", "component": None, "confidence": 1.0, "lost_s": 0.0,
                           "evidence": [], "causes": []}
    if math.isnan(base):
        out["confidence"] = 0.0  # not enough history to judge
    elif not out["slow"]:
        out["confidence"] = round(0.5 + 0.5 * min(1.0, max(0.0, (thr - d) / max(thr - base, 1e-9))), 3)
    else:
        out.update(_explain(conn, job, step, topo, meta, ranks, row, float(bl.base_transfer[i]), base, start, d))
    if store:
        _store(conn, job, out)
    return out


def _explain(conn: Any, job: str, step: int, topo: Any, meta: pd.DataFrame, ranks: pd.DataFrame, row: Any,
             base_t: float,
             base: float, start: float, d: float) -> dict[str, Any]:
    lost = d - base
    steps_df, coll = q.rank_rows(conn, job=job, step=step)
    per_rank = decompose(steps_df, coll) if len(steps_df) else steps_df
    st = find_straggler(per_rank) if len(per_rank) else None
    transfer = float(row["transfer"]) if pd.notna(row["transfer"]) else base_t
    e_comm = max(transfer - base_t, 0.0) if math.isfinite(base_t) else 0.0
    e_work = max((d - transfer) - (base - base_t), 0.0) if math.isfinite(base_t) else lost
    total = e_comm + e_work or 1.0
    pad = min(max(0.5 * d, 1.0), 5.0)
    ev, coverage = _telemetry(conn, meta, start, start + d + pad)
    if len(ev):
        ev = candidates(ev, topo)
    conf_t = min(1.0, len(steps_df) / max(len(ranks), 1)) if len(ranks) else 0.5
    causes = combine_causes(lost, e_work / total, e_comm / total, lambda: _work_cause(st, ev, topo, conf_t),
                            lambda: _net_cause(ev, coverage))
    if not causes:
        causes = [{"layer": "unknown", "component": None, "confidence": 0.2, "evidence": [], "lost_s": lost}]
    causes = rank_causes(causes)
    evidence = [e for c in causes for e in c["evidence"]]
    top = causes[0]
    return {"layer": top["layer"], "component": top["component"],
            "confidence": round(float(min(max(top["confidence"], 0.0), 0.99)), 3), "lost_s": round(lost, 6),
            "evidence": evidence,
            "causes": [{"layer": c["layer"], "component": c["component"], "lost_s": round(c["lost_s"], 6),
                        "confidence": round(float(min(max(c["confidence"], 0.0), 0.99)), 3)} for c in causes]}


def combine_causes(lost: float, w_share: float, n_share: float, work_cause: Callable[[], dict[str, Any]],
                   net_cause: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    """The causes of a slow step's lost time from its local-work and network shares (each cause is
    computed only when needed). Work that no rank straggled on and no volume explains, while the
    network shows an anomaly, is time waiting on the network outside the timed collectives
    (retransmission stalls before a collective starts, barriers): it goes to the network cause
    instead of becoming a second, unexplained one."""
    work = work_cause() if w_share >= MIN_SHARE else None
    net = net_cause() if n_share >= MIN_SHARE or work is not None else None
    if work is not None and work["layer"] == "unknown" and net is not None and net["layer"] != "unknown":
        work, n_share = None, n_share + w_share
    causes = []
    for share, c in ((w_share, work), (n_share, net)):
        if c is not None and share >= MIN_SHARE:
            c["lost_s"] = lost * share
            c["confidence"] *= 0.7 + 0.3 * share
            causes.append(c)
    return causes


def rank_causes(causes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Worst first, but a cause the engine could not name (``unknown``: no straggler, no anomalous
    telemetry) never heads the answer over one it could: its lost time is only what the timings
    could not place (in the lab: time at a checkpoint barrier during a network fault)."""
    return sorted(causes, key=lambda c: (c["layer"] == "unknown", -c["lost_s"]))


def _store(conn: Any, job: str, a: dict[str, Any]) -> None:
    conn.execute(
        """INSERT INTO attributions (job, step, step_start, slow, duration_s, baseline_s, layer, component,
                                     confidence, lost_s, evidence, causes)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (job, step) DO UPDATE SET computed_at = now(), step_start = EXCLUDED.step_start,
             slow = EXCLUDED.slow, duration_s = EXCLUDED.duration_s, baseline_s = EXCLUDED.baseline_s,
             layer = EXCLUDED.layer, component = EXCLUDED.component, confidence = EXCLUDED.confidence,
             lost_s = EXCLUDED.lost_s, evidence = EXCLUDED.evidence, causes = EXCLUDED.causes""",
        (job, a["step"], a["start"], a["slow"], a["duration_s"], a["baseline_s"], a["layer"], a["component"],
         a["confidence"], a["lost_s"], json.dumps(a["evidence"]), json.dumps(a["causes"])))


def _step_range(conn: Any, job: str, from_ts: datetime | None, to_ts: datetime | None) -> tuple[int, int] | None:
    r = conn.execute("SELECT min(step), max(step) FROM steps WHERE job = %s AND (%s::timestamptz IS NULL OR "
                     "start_ts >= %s) AND (%s::timestamptz IS NULL OR start_ts <= %s)",
                     (job, from_ts, from_ts, to_ts, to_ts)).fetchone()
    return None if r is None or r[0] is None else (int(r[0]), int(r[1]))


def list_steps(conn: Any, *, job: str, from_ts: datetime | None = None, to_ts: datetime | None = None,
               slow_only: bool = False) -> list[dict[str, Any]]:
    """docs/API.md steps listing: step, start, duration_s, baseline_s, slow."""
    rng = _step_range(conn, job, from_ts, to_ts)
    if rng is None:
        return []
    ranks, _, _ = _job_topo(conn, job)
    summ = _summaries(conn, job, rng[0] - HISTORY_STEPS, rng[1], len(ranks))
    bl = _baselines_for(summ)
    lo = from_ts.timestamp() if from_ts else -math.inf
    hi = to_ts.timestamp() if to_ts else math.inf
    out = []
    for j, (s, start, d) in enumerate(zip(summ["step"], summ["start"], summ["dur"], strict=False)):
        if s < rng[0] or not lo <= start <= hi or (slow_only and not bl.slow[j]):
            continue
        b = bl.base[j]
        out.append({"step": int(s), "start": _iso(float(start)), "duration_s": round(float(d), 6),
                    "baseline_s": None if math.isnan(b) else round(float(b), 6), "slow": bool(bl.slow[j])})
    return out


def process_pending(conn: Any, *, job: str | None = None, limit: int = 5000) -> int:
    """Attribute (and store) steps that have no attribution yet and whose data is in."""
    jobs = [job] if job else [r[0] for r in conn.execute("SELECT name FROM jobs ORDER BY name").fetchall()]
    done = 0
    for j in jobs:
        last = conn.execute("SELECT max(step) FROM attributions WHERE job = %s", (j,)).fetchone()
        lo = -1 if last is None or last[0] is None else int(last[0]) - HISTORY_STEPS
        rows = conn.execute(
            """SELECT s.step, extract(epoch FROM max(s.end_ts))::float8, count(*) FROM steps s
               WHERE s.job = %s AND s.step > %s AND NOT EXISTS
                 (SELECT 1 FROM attributions a WHERE a.job = s.job AND a.step = s.step)
               GROUP BY s.step ORDER BY s.step""", (j, lo)).fetchall()
        if not rows:
            continue
        ranks, topo, _ = _job_topo(conn, j)
        top_step = conn.execute("SELECT max(step) FROM steps WHERE job = %s", (j,)).fetchone()[0]
        horizon = _telemetry_horizon(conn, topo)
        now = time.time()
        for step, end, n in rows:
            complete = n >= len(ranks) or step <= top_step - 2
            telemetry_in = horizon is None or horizon >= end + 2.0 or end < now - 120
            if not (complete and telemetry_in):
                break  # later steps wait too: baselines are built in order
            attribute_step(conn, job=j, step=int(step), store=True)
            done += 1
            if done >= limit:
                return done
    return done


def _telemetry_horizon(conn: Any, topo: Any) -> float | None:
    """Newest sample time of a few of the job's NIC series; None when the job has no telemetry."""
    nics = [s for s, r in topo.role.items() if r == "nic"][:8]
    if not nics:
        return None
    r = conn.execute(
        """SELECT extract(epoch FROM max(x.ts))::float8 FROM series se JOIN sources src ON src.id = se.source_id,
           LATERAL (SELECT ts FROM samples s WHERE s.series_id = se.id ORDER BY ts DESC LIMIT 1) x
           WHERE src.name = ANY(%s)""", (nics,)).fetchone()
    return None if r is None or r[0] is None else float(r[0])


def job_report(conn: Any, *, job: str, from_ts: datetime | None = None,
               to_ts: datetime | None = None) -> dict[str, Any]:
    """Time lost per layer and per component over a time range, worst first."""
    rng = _step_range(conn, job, from_ts, to_ts)
    out: dict[str, Any] = {"job": job, "from": from_ts.isoformat() if from_ts else None,
                           "to": to_ts.isoformat() if to_ts else None, "steps": 0, "slow_steps": 0,
                           "lost_s": 0.0, "layers": [], "components": []}
    if rng is None:
        return out
    have = {r[0] for r in conn.execute("SELECT step FROM attributions WHERE job = %s AND step BETWEEN %s AND %s",
                                       (job, rng[0], rng[1])).fetchall()}
    for s in conn.execute("SELECT DISTINCT step FROM steps WHERE job = %s AND step BETWEEN %s AND %s ORDER BY step",
                          (job, rng[0], rng[1])).fetchall():
        if s[0] not in have:
            attribute_step(conn, job=job, step=int(s[0]), store=True)
    rows = conn.execute("SELECT step, slow, lost_s, layer, component, causes FROM attributions "
                        "WHERE job = %s AND step BETWEEN %s AND %s", (job, rng[0], rng[1])).fetchall()
    parts = []
    for step, slow, lost, layer, comp, causes in rows:
        if not slow:
            continue
        for c in causes or [{"layer": layer, "component": comp, "lost_s": lost}]:
            parts.append((step, c["layer"], c.get("component"), float(c.get("lost_s") or 0.0)))
    out["steps"] = len(rows)
    out["slow_steps"] = sum(1 for r in rows if r[1])
    if parts:
        df = pd.DataFrame(parts, columns=["step", "layer", "component", "lost_s"])
        out["lost_s"] = round(float(df["lost_s"].sum()), 6)
        lay = df.groupby("layer").agg(lost_s=("lost_s", "sum"), steps=("step", "nunique"))
        out["layers"] = [{"layer": k, "lost_s": round(float(v.lost_s), 6), "steps": int(v.steps)}
                         for k, v in lay.sort_values("lost_s", ascending=False).iterrows()]
        comp = df.fillna({"component": ""}).groupby(["layer", "component"]).agg(
            lost_s=("lost_s", "sum"), steps=("step", "nunique"))
        out["components"] = [{"component": k[1] or None, "layer": k[0], "lost_s": round(float(v.lost_s), 6),
                               "steps": int(v.steps)}
                              for k, v in comp.sort_values("lost_s", ascending=False).iterrows()]
    return out
