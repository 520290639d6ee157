"""Why is run B slower (or faster) than run A: the difference in median step time decomposed into
phases, collectives, bus bandwidth, labels and versions, placement, and blamed components (#48).

Phases per step follow the critical path. In a synchronous step every rank waits for the last one
to reach the collective, so the rank that waited least (least exposed communication) is the one
whose time the step is: its data loading, its checkpoint writing, its exposed communication (the
union of its collectives' intervals inside the step), and compute as the rest of the step's
duration. The step time is the longest rank's. Per job, each is the median over the compared steps;
the decomposition's residual (median of sums vs sum of medians) is reported, never hidden.

Explanations are rules over the phase deltas (a mapping of phase to the differences that can move
it), each effect a measured phase delta in seconds:

- exposed communication: versions that differ (NCCL, torch, CUDA), else fabric ports or NICs blamed
  in one run only, else switch ports used by one run only;
- compute: a host used by one run only whose ranks compute slower than their peers (per-host median
  of rank compute against the other hosts' median), else compute components blamed in one run only,
  else differing versions;
- data and checkpoint: storage components blamed in one run only, else placement.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import dict_row

from fabricscope.service.acceptance.efficiency import job_efficiency

PHASES = ("data", "compute", "exposed_comm", "checkpoint")
VERSION_KEYS = ("nccl", "nccl_version", "torch", "torch_version", "cuda", "cuda_version", "driver", "rccl")
SHAPE_KEYS = ("model", "world_size")
PHASE_LAYERS = {"exposed_comm": ("fabric", "link", "nic"), "compute": ("compute", "host"),
                "data": ("storage", "host"), "checkpoint": ("storage",)}
MIN_HOST_EXCESS_S = 0.005  # a host's compute over its peers' below this is noise, not a placement effect

# Per rank and step of the last `n` steps: duration, data, checkpoint, exposed communication.
RANK_STEPS_SQL = """
WITH last AS (SELECT DISTINCT step FROM steps WHERE job = %(job)s ORDER BY step DESC LIMIT %(n)s),
s AS (
    SELECT s.rank, s.step, s.start_ts, s.end_ts, s.duration_s,
           coalesce(s.data_s, CASE WHEN jsonb_typeof(s.phases -> 'data') = 'number'
                                   THEN (s.phases ->> 'data')::float8 END, 0) AS data_s,
           coalesce(s.checkpoint_s, CASE WHEN jsonb_typeof(s.phases -> 'checkpoint') = 'number'
                                         THEN (s.phases ->> 'checkpoint')::float8 END, 0) AS ckpt_s
    FROM steps s JOIN last USING (step) WHERE s.job = %(job)s
),
c AS (
    SELECT c.rank, c.step, greatest(c.start_ts, s.start_ts) AS a, least(c.end_ts, s.end_ts) AS b
    FROM collectives c JOIN s ON s.rank = c.rank AND s.step = c.step
    WHERE c.job = %(job)s AND c.op <> 'barrier' AND c.step IN (SELECT step FROM last)
),
o AS (
    SELECT rank, step, a, b,
           max(b) OVER (PARTITION BY rank, step ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
    FROM c
),
per AS (
    SELECT rank, step, sum(greatest(extract(epoch FROM b - greatest(a, coalesce(prev, a))), 0)) AS exposed
    FROM o GROUP BY rank, step
)
SELECT s.rank, s.step, s.duration_s, s.data_s, s.ckpt_s, coalesce(per.exposed, 0) AS exposed, r.host
FROM s LEFT JOIN per USING (rank, step) LEFT JOIN job_ranks r ON r.job = %(job)s AND r.rank = s.rank
ORDER BY s.step, s.rank
"""

COLLECTIVES_SQL = """
WITH last AS (SELECT DISTINCT step FROM steps WHERE job = %(job)s ORDER BY step DESC LIMIT %(n)s)
SELECT op, CASE WHEN coalesce(bytes, 0) <= 1 THEN 1
                ELSE 1::bigint << (length(ltrim(bytes::bit(64)::text, '0')) - 1) END AS bucket,
       count(*) AS n, percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY duration_s) AS q
FROM collectives WHERE job = %(job)s AND step IN (SELECT step FROM last) GROUP BY 1, 2
"""

PLACEMENT_SQL = """
SELECT r.host, r.host || ':' || r.nic AS nic,
       (SELECT CASE WHEN l.a = r.host || ':' || r.nic THEN l.b ELSE l.a END FROM links l
        WHERE l.a = r.host || ':' || r.nic OR l.b = r.host || ':' || r.nic LIMIT 1) AS port
FROM job_ranks r WHERE r.job = %(job)s
"""

BLAMED_SQL = """
SELECT coalesce(x ->> 'component', '') AS component, coalesce(x ->> 'layer', 'unknown') AS layer,
       sum(CASE WHEN jsonb_typeof(x -> 'lost_s') = 'number' THEN greatest((x ->> 'lost_s')::float8, 0) ELSE 0 END)
           AS lost_s, count(*) AS steps
FROM attributions a CROSS JOIN LATERAL jsonb_array_elements(
    CASE WHEN jsonb_typeof(a.causes) = 'array' AND jsonb_array_length(a.causes) > 0 THEN a.causes
         ELSE jsonb_build_array(jsonb_build_object('layer', a.layer, 'component', a.component,
                                                   'lost_s', a.lost_s)) END) x
WHERE a.job = %(job)s AND a.slow AND a.step >= %(lo)s GROUP BY 1, 2
"""


class _Run:
    """One job's measured figures (all reads happen in `load`)."""

    def __init__(self, conn: psycopg.Connection, job: str, labels: Mapping[str, Any], max_steps: int) -> None:
        self.job, self.labels = job, dict(labels)
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(RANK_STEPS_SQL, {"job": job, "n": max_steps}).fetchall()
            self.collectives = {(r["op"], int(r["bucket"])): (int(r["n"]), float(r["q"][0]), float(r["q"][1]))
                                for r in cur.execute(COLLECTIVES_SQL, {"job": job, "n": max_steps}).fetchall()}
            self.placement = cur.execute(PLACEMENT_SQL, {"job": job}).fetchall()
            lo = min((r["step"] for r in rows), default=0)
            self.blamed = {(r["component"], r["layer"]): (float(r["lost_s"]), int(r["steps"]))
                           for r in cur.execute(BLAMED_SQL, {"job": job, "lo": lo}).fetchall() if r["component"]}
        self.ranks = len({r["rank"] for r in rows})
        by_step: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            by_step.setdefault(int(r["step"]), []).append(r)
        self.steps = len(by_step)
        per: dict[str, list[float]] = {p: [] for p in (*PHASES, "step")}
        host_compute: dict[str, list[float]] = {}
        for recs in by_step.values():
            crit = min(recs, key=lambda r: (r["exposed"], r["rank"]))  # the last to arrive: the step's path
            step_s = max(float(r["duration_s"]) for r in recs)
            parts = {"data": float(crit["data_s"]), "checkpoint": float(crit["ckpt_s"]),
                     "exposed_comm": float(crit["exposed"])}
            parts["compute"] = step_s - sum(parts.values())
            for p, v in parts.items():
                per[p].append(v)
            per["step"].append(step_s)
            for r in recs:
                if r["host"] is not None:
                    host_compute.setdefault(str(r["host"]), []).append(
                        float(r["duration_s"]) - float(r["data_s"]) - float(r["ckpt_s"]) - float(r["exposed"]))
        self.median = {p: statistics.median(v) if v else 0.0 for p, v in per.items()}
        self.host_compute = {h: statistics.median(v) for h, v in host_compute.items()}

    def host_excess(self) -> dict[str, float]:
        """Per host: its ranks' median compute over the median of the other hosts' (0 alone)."""
        out = {}
        for h, v in self.host_compute.items():
            peers = [x for k, x in self.host_compute.items() if k != h]
            out[h] = v - statistics.median(peers) if peers else 0.0
        return out

    def used(self, what: str) -> set[str]:
        return {str(r[what]) for r in self.placement if r[what]}


def _set_diff(a: set[str], b: set[str]) -> dict[str, list[str]]:
    return {"only_a": sorted(a - b), "only_b": sorted(b - a)}


def _labels(a: _Run, b: _Run) -> list[dict[str, Any]]:
    keys = sorted({*a.labels, *b.labels})
    return [{"label": k, "a": a.labels.get(k), "b": b.labels.get(k),
             "version": k in VERSION_KEYS} for k in keys if a.labels.get(k) != b.labels.get(k)]


def _blamed_diff(a: _Run, b: _Run) -> list[dict[str, Any]]:
    out = []
    for (comp, layer), (lost, n) in sorted(a.blamed.items()):
        if not any(c == comp for c, _ in b.blamed):
            out.append({"component": comp, "layer": layer, "run": "a", "lost_s": round(lost, 6), "slow_steps": n,
                        "per_step_s": round(lost / a.steps, 6) if a.steps else None})
    for (comp, layer), (lost, n) in sorted(b.blamed.items()):
        if not any(c == comp for c, _ in a.blamed):
            out.append({"component": comp, "layer": layer, "run": "b", "lost_s": round(lost, 6), "slow_steps": n,
                        "per_step_s": round(lost / b.steps, 6) if b.steps else None})
    return out


def _explain(phase: str, delta: float, a: _Run, b: _Run, labels: list[dict[str, Any]],
             blamed: list[dict[str, Any]], placement: dict[str, dict[str, list[str]]]) -> dict[str, Any]:
    """The difference that explains one phase's delta, by the rules in the module docstring."""
    versions = [x for x in labels if x["version"]]
    named = [x for x in blamed if x["layer"] in PHASE_LAYERS[phase]]
    what: list[str] = []
    kind = "unexplained"
    if phase == "compute":
        hosts = []
        for run, tag in ((b, "b"), (a, "a")):
            only = set(placement["hosts"]["only_" + tag])
            exc = run.host_excess()
            hosts += [(tag, h, exc[h]) for h in sorted(only) if h in exc and exc[h] > MIN_HOST_EXCESS_S]
        if hosts:
            kind = "placement"
            what = [f"host {h} (run {t} only) computes {e:.3f} s a step slower than its peers" for t, h, e in hosts]
    if kind == "unexplained" and phase == "exposed_comm" and versions:
        kind = "versions"
    if kind == "unexplained" and named:
        kind = "component"
        what = [f"{x['component']} ({x['layer']}) blamed in run {x['run']} only, {x['per_step_s']} s a step"
                for x in named]
    if kind == "unexplained" and phase == "compute" and versions:
        kind = "versions"
    if kind == "versions":
        what = [f"{x['label']}: {x['a']} -> {x['b']}" for x in versions]
    ports = placement["ports"]
    if kind == "unexplained" and phase == "exposed_comm" and (ports["only_a"] or ports["only_b"]):
        kind = "placement"
        what = [f"switch ports used by one run only: {placement['ports']}"]
    return {"phase": phase, "effect_s": round(delta, 6), "kind": kind, "differences": what}


def compare(conn: psycopg.Connection, *, a: str, b: str, max_steps: int = 2000) -> dict[str, Any] | None:
    """The comparison of job `a` (the reference) with job `b`; None when either job is unknown."""
    found = conn.execute("SELECT name, labels FROM jobs WHERE name = ANY(%s)", ([a, b],)).fetchall()
    jobs: dict[str, Any] = dict(found)
    if a not in jobs or b not in jobs:
        return None
    ra, rb = _Run(conn, a, jobs[a] or {}, max_steps), _Run(conn, b, jobs[b] or {}, max_steps)
    warnings = []
    if ra.ranks != rb.ranks:
        warnings.append(f"world sizes differ: {ra.ranks} vs {rb.ranks} ranks; compared anyway")
    for k in SHAPE_KEYS:
        if ra.labels.get(k) != rb.labels.get(k):
            warnings.append(f"label {k} differs: {ra.labels.get(k)!r} vs {rb.labels.get(k)!r}; compared anyway")
    if not ra.steps or not rb.steps:
        warnings.append("a run has no step timings: nothing to decompose")
    gap = rb.median["step"] - ra.median["step"]
    phases: list[dict[str, Any]] = [{"phase": p, "a_s": round(ra.median[p], 6), "b_s": round(rb.median[p], 6),
               "delta_s": round(rb.median[p] - ra.median[p], 6)} for p in PHASES]
    residual = gap - sum(p["delta_s"] for p in phases)
    labels = _labels(ra, rb)
    placement = {k: _set_diff(ra.used(k[:-1]), rb.used(k[:-1]))  # hosts -> host, nics -> nic, ports -> port
                 for k in ("hosts", "nics", "ports")}
    blamed = _blamed_diff(ra, rb)
    explanations = [_explain(p["phase"], p["delta_s"], ra, rb, labels, blamed, placement) for p in phases
                    if abs(p["delta_s"]) > 0]
    explanations.sort(key=lambda e: -abs(e["effect_s"]))
    for e in explanations:
        e["share_of_gap"] = round(e["effect_s"] / gap, 4) if gap else None
    colls = []
    for key in sorted({*ra.collectives, *rb.collectives}):
        ca, cb = ra.collectives.get(key), rb.collectives.get(key)
        colls.append({"op": key[0], "bucket": key[1],
                      "a": None if ca is None else {"count": ca[0], "p50_s": ca[1], "p99_s": ca[2]},
                      "b": None if cb is None else {"count": cb[0], "p50_s": cb[1], "p99_s": cb[2]},
                      "delta_p50_s": None if ca is None or cb is None else round(cb[1] - ca[1], 6)})
    busbw: dict[tuple[str, int, int], dict[str, Any]] = {}
    for tag, job in (("a", a), ("b", b)):
        for r in job_efficiency(conn, job=job, fabric=None, from_ts=None, to_ts=None)["rows"]:
            busbw.setdefault((r["op"], r["bucket"], r["group_size"]), {})[tag] = r["fraction"]
    top = [e for e in explanations if e["kind"] != "unexplained"][:2]
    headline = "; ".join(f"{e['phase']} {e['effect_s']:+.3f} s ({e['kind']}: {', '.join(e['differences'])})"
                         for e in top) or "no difference explains the gap"
    return {
        "a": a, "b": b, "steps_compared": {"a": ra.steps, "b": rb.steps},
        "median_step_s": {"a": round(ra.median["step"], 6), "b": round(rb.median["step"], 6)},
        "gap_s": round(gap, 6), "gap_ratio": round(gap / ra.median["step"], 6) if ra.median["step"] else None,
        "summary": headline, "explanations": explanations,
        "phases": phases, "residual_s": round(residual, 6),
        "collectives": colls,
        "busbw_fraction": [{"op": k[0], "bucket": k[1], "group_size": k[2], "a": v.get("a"), "b": v.get("b")}
                           for k, v in sorted(busbw.items())],
        "labels": labels, "placement": placement, "blamed": blamed, "warnings": warnings,
    }
