"""Answers from the fleet ledger: components or layers ranked by GPU-hours lost, and one component's
incidents. The ranking is one statement over the ledger's daily rows (top-N in SQL, the covering
index `fleet_ledger_day`); only the N rows returned get their worst jobs and evidence, through the
index `fleet_ledger_component`.

Windows are whole UTC days (the ledger's rows): `from` is rounded down to its day, and the previous
window is the one of the same length just before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row

DAY = timedelta(days=1)
WORST_JOBS = 3

# {key}: component or layer (fixed names from this module, never user input)
RANK_SQL = """
WITH w AS (
    SELECT {key} AS key, layer, kind, job, gpu_s, slow_steps, first_seen, last_seen, day >= %(lo)s AS cur
    FROM fleet_ledger
    WHERE day >= %(prev)s AND day < %(hi)s {named}
      AND (%(layer)s::text IS NULL OR layer = %(layer)s) AND (%(kind)s::text IS NULL OR kind = %(kind)s)
      AND (%(only)s::text IS NULL OR {key} = %(only)s)
),
g AS (
    SELECT key, sum(gpu_s) FILTER (WHERE cur) AS gpu_s, coalesce(sum(gpu_s) FILTER (WHERE NOT cur), 0) AS prev_s,
           count(DISTINCT job) FILTER (WHERE cur) AS jobs, sum(slow_steps) FILTER (WHERE cur) AS slow_steps,
           min(first_seen) FILTER (WHERE cur) AS first_seen, max(last_seen) FILTER (WHERE cur) AS last_seen,
           (array_agg(layer ORDER BY gpu_s DESC) FILTER (WHERE cur))[1] AS layer,
           (array_agg(kind ORDER BY gpu_s DESC) FILTER (WHERE cur))[1] AS kind
    FROM w GROUP BY key
    HAVING sum(gpu_s) FILTER (WHERE cur) > 0
    ORDER BY 2 DESC, key LIMIT %(limit)s
)
SELECT g.*, ev.evidence, ev.evidence_n, wj.worst
FROM g
LEFT JOIN LATERAL (
    SELECT evidence, sum(evidence_n) AS evidence_n FROM fleet_ledger f
    WHERE f.{key} = g.key AND f.day >= %(lo)s AND f.day < %(hi)s AND f.evidence IS NOT NULL {named_f}
      AND (%(layer)s::text IS NULL OR f.layer = %(layer)s) AND (%(kind)s::text IS NULL OR f.kind = %(kind)s)
    GROUP BY evidence ORDER BY 2 DESC, 1 LIMIT 1) ev ON true
CROSS JOIN LATERAL (
    SELECT jsonb_agg(jsonb_build_object('job', job, 'gpu_hours', gpu_s / 3600.0, 'slow_steps', n)
                     ORDER BY gpu_s DESC, job) AS worst
    FROM (SELECT job, sum(gpu_s) AS gpu_s, sum(slow_steps) AS n FROM fleet_ledger f
          WHERE f.{key} = g.key AND f.day >= %(lo)s AND f.day < %(hi)s {named_f}
            AND (%(layer)s::text IS NULL OR f.layer = %(layer)s) AND (%(kind)s::text IS NULL OR f.kind = %(kind)s)
          GROUP BY job ORDER BY 2 DESC, job LIMIT {worst}) j) wj
ORDER BY g.gpu_s DESC, g.key
"""


def _sql(by: Literal["component", "layer"]) -> str:
    named = "AND component <> ''" if by == "component" else ""
    return RANK_SQL.format(key=by, named=named, named_f=named.replace("component", "f.component"),
                           worst=WORST_JOBS)


COMPONENT_SQL = _sql("component")
LAYER_SQL = _sql("layer")


@dataclass(frozen=True)
class Window:
    lo: datetime  # inclusive, a UTC midnight
    hi: datetime  # exclusive

    @classmethod
    def of(cls, from_: datetime, to: datetime) -> Window:
        f = from_.astimezone(UTC)
        return cls(datetime(f.year, f.month, f.day, tzinfo=UTC), to)

    @property
    def prev(self) -> datetime:
        return self.lo - (self.hi - self.lo)


def _row(r: dict[str, Any], by: str) -> dict[str, Any]:
    gpu_s, prev_s = float(r["gpu_s"]), float(r["prev_s"])
    out = {by: r["key"]}
    if by == "component":
        out.update(layer=r["layer"], kind=r["kind"])
    out.update({
        "gpu_hours": round(gpu_s / 3600.0, 6), "jobs": int(r["jobs"]), "slow_steps": int(r["slow_steps"]),
        "first_seen": r["first_seen"], "last_seen": r["last_seen"],
        "previous_gpu_hours": round(prev_s / 3600.0, 6), "change_gpu_hours": round((gpu_s - prev_s) / 3600.0, 6),
        # None where the previous window lost nothing to it: a new component, not an infinite change
        "change_ratio": round(gpu_s / prev_s - 1.0, 6) if prev_s > 0 else None,
        "top_evidence": ({"evidence": r["evidence"], "steps": int(r["evidence_n"])} if r["evidence"] else None),
        "worst_jobs": [{**j, "gpu_hours": round(float(j["gpu_hours"]), 6)} for j in (r["worst"] or [])],
    })
    return out


def ranking(conn: psycopg.Connection, *, by: Literal["component", "layer"], window: Window, layer: str | None,
            kind: str | None, limit: int, only: str | None = None) -> list[dict[str, Any]]:
    """Components (or layers) by GPU-hours lost in the window, worst first, at most ``limit``."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(COMPONENT_SQL if by == "component" else LAYER_SQL,
                           {"lo": window.lo, "hi": window.hi, "prev": window.prev, "layer": layer, "kind": kind,
                            "limit": limit, "only": only}).fetchall()
    return [_row(r, by) for r in rows]


INCIDENT_ROWS_SQL = """
WITH j AS (SELECT DISTINCT job FROM fleet_ledger WHERE component = %(c)s AND day >= %(lo)s AND day < %(hi)s)
SELECT a.job, a.step, coalesce(a.step_start, a.computed_at) AS ts, a.duration_s, a.baseline_s,
       greatest(coalesce(a.lost_s, a.duration_s - a.baseline_s, 0), 0) AS excess, a.layer, a.component,
       a.causes, a.evidence, f.ranks
FROM j JOIN attributions a ON a.job = j.job AND a.slow
LEFT JOIN LATERAL (SELECT ranks FROM fleet_ledger f WHERE f.job = a.job AND f.component = %(c)s
                   ORDER BY day DESC LIMIT 1) f ON true
WHERE coalesce(a.step_start, a.computed_at) >= %(lo)s AND coalesce(a.step_start, a.computed_at) < %(hi)s
  AND (a.component = %(c)s OR a.causes @> jsonb_build_array(jsonb_build_object('component', %(c)s::text)))
ORDER BY a.job, a.step
"""


def _share(row: dict[str, Any], component: str) -> tuple[float, str]:
    """This component's share of the step's loss, and the layer it was blamed under (as the rollup)."""
    causes = [c for c in (row["causes"] or []) if isinstance(c, dict)] or [
        {"layer": row["layer"], "component": row["component"]}]
    w = [max(float(c["lost_s"]), 0.0) if isinstance(c.get("lost_s"), int | float) else 0.0 for c in causes]
    mine = [i for i, c in enumerate(causes) if c.get("component") == component]
    if not mine:
        return 0.0, str(row["layer"])
    total = sum(w)
    share = sum(w[i] for i in mine) / total if total > 0 else len(mine) / len(causes)
    return share, str(causes[mine[0]].get("layer") or "unknown")


def incidents(conn: psycopg.Connection, *, component: str, window: Window, gap_steps: int,
              limit: int) -> list[dict[str, Any]]:
    """Runs of slow steps blamed on the component, per job: steps at most ``gap_steps`` apart are one
    incident. Each with its job, steps, times, GPU-hours, evidence counts and the component's own
    counters (max value against baseline over the run)."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(INCIDENT_ROWS_SQL, {"c": component, "lo": window.lo, "hi": window.hi}).fetchall()
    out: list[dict[str, Any]] = []
    cur_inc: dict[str, Any] | None = None
    for r in rows:
        share, layer = _share(r, component)
        lost = float(r["excess"]) * share
        ranks = int(r["ranks"] or 1)
        if cur_inc is None or cur_inc["job"] != r["job"] or r["step"] - cur_inc["last_step"] > gap_steps:
            cur_inc = {"job": r["job"], "layer": layer, "first_step": r["step"], "last_step": r["step"],
                       "start": r["ts"], "end": r["ts"], "slow_steps": 0, "lost_s": 0.0, "gpu_hours": 0.0,
                       "ranks": ranks, "_ev": {}, "_ctr": {}}
            out.append(cur_inc)
        cur_inc.update(last_step=r["step"], end=r["ts"])
        cur_inc["slow_steps"] += 1
        cur_inc["lost_s"] += lost
        cur_inc["gpu_hours"] += lost * ranks / 3600.0
        for e in r["evidence"] or []:
            if not (isinstance(e, dict) and "metric" in e and "source" in e):
                continue
            label = f"{e['metric']} on {e['source']}"
            cur_inc["_ev"][label] = cur_inc["_ev"].get(label, 0) + 1
            src = str(e["source"])
            if (src == component or src.startswith(component + ":")) and isinstance(e.get("value"), int | float):
                key = (src, str(e["metric"]))
                prev = cur_inc["_ctr"].get(key)
                if prev is None or e["value"] > prev["value"]:
                    cur_inc["_ctr"][key] = {"source": src, "metric": e["metric"], "value": e["value"],
                                            "baseline": e.get("baseline")}
    for inc in out:
        ev = inc.pop("_ev")
        top = sorted(ev.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        inc["evidence"] = [{"evidence": k, "steps": n} for k, n in top]
        inc["counters"] = sorted(inc.pop("_ctr").values(), key=lambda c: (c["source"], c["metric"]))
        inc["lost_s"] = round(inc["lost_s"], 6)
        inc["gpu_hours"] = round(inc["gpu_hours"], 6)
    out.sort(key=lambda i: (i["start"], i["job"]))
    return out[-limit:] if limit else out
