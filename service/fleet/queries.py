"""Answers from the fleet ledger: components or layers ranked by GPU-hours lost, and one component's
incidents. The ranking is one unprepared statement: top-N in SQL over the aligned spans of
`fleet_span`; only the N rows returned get their jobs and worst jobs (`fleet_span_jobs`), previous
window and evidence, by index on the component.

Windows are whole UTC days (the ledger's rows): `from` is rounded down to its day, and the previous
window is the one of the same length just before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row

from fabricscope.service.fleet.rollup import spans

DAY = timedelta(days=1)
WORST_JOBS = 3

_F = """AND (%(layer)s::text IS NULL OR {t}layer = %(layer)s) AND (%(kind)s::text IS NULL OR {t}kind = %(kind)s)"""
FILTERS = _F.format(t="")
FILTERS_F = _F.format(t="f.")
FILTERS_S = _F.format(t="s.")

# Top-N by the window's sum over fleet_span (narrow rows, one per component and aligned span of days
# covering the window, ~8 for 30 days, all jobs summed: a hash aggregate of one sum, nothing else);
# the rest only for the N rows, by index on the component: the previous window and first/last seen
# from their daily rows, jobs and worst jobs from fleet_span_jobs (the same spans, per job), evidence
# from fleet_daily_jobs; never from fleet_ledger's one row per job and day.
COMPONENT_SQL = f"""
WITH g AS MATERIALIZED (
    SELECT component, sum(gpu_s) AS gpu_s
    FROM unnest(%(levels)s::smallint[], %(starts)s::timestamptz[]) AS b(level, start)
    JOIN fleet_span USING (level, start)
    WHERE component <> '' {FILTERS} AND (%(only)s::text IS NULL OR component = %(only)s)
    GROUP BY component HAVING sum(gpu_s) > 0
    ORDER BY 2 DESC, component LIMIT %(limit)s
),
-- the N components by number (grouping and sorting on an int, not on the names under the collation)
gn AS MATERIALIZED (SELECT component, row_number() OVER () AS rn FROM g),
-- the N components' jobs in the window: one index-only range read per component and span
pj AS (
    SELECT gn.rn, s.job, sum(s.gpu_s) AS gs, sum(s.slow_steps) AS n
    FROM gn CROSS JOIN unnest(%(levels)s::smallint[], %(starts)s::timestamptz[]) AS b(level, start)
    JOIN fleet_span_jobs s ON s.component = gn.component AND s.level = b.level AND s.start = b.start
    WHERE true {FILTERS_S}
    GROUP BY gn.rn, s.job
),
-- jobs affected, and the worst {WORST_JOBS} ("C": a byte order tie-break, as before)
j AS (
    SELECT gn.component, x.jobs, x.worst FROM gn JOIN (
        SELECT rn, count(*) AS jobs,
               (SELECT jsonb_agg(jsonb_build_object('job', t.job, 'gpu_hours', t.gs / 3600.0, 'slow_steps', t.n)
                                 ORDER BY t.o)
                FROM unnest((array_agg(job ORDER BY gs DESC, job COLLATE "C"))[1:{WORST_JOBS}],
                            (array_agg(gs ORDER BY gs DESC, job COLLATE "C"))[1:{WORST_JOBS}],
                            (array_agg(n ORDER BY gs DESC, job COLLATE "C"))[1:{WORST_JOBS}])
                     WITH ORDINALITY AS t(job, gs, n, o)) AS worst
        FROM pj GROUP BY rn) x USING (rn)
)
SELECT g.component AS key, g.gpu_s, p.prev_s, d.layer, d.kind, d.slow_steps, d.first_seen, d.last_seen, j.jobs,
       j.worst, ev.evidence, ev.evidence_n
FROM g JOIN j USING (component)
CROSS JOIN LATERAL (
    SELECT (array_agg(layer ORDER BY gpu_s DESC))[1] AS layer, (array_agg(kind ORDER BY gpu_s DESC))[1] AS kind,
           sum(slow_steps) AS slow_steps, min(first_seen) AS first_seen, max(last_seen) AS last_seen
    FROM fleet_daily f WHERE f.component = g.component AND f.day >= %(lo)s AND f.day < %(hi)s {FILTERS_F}) d
CROSS JOIN LATERAL (
    SELECT coalesce(sum(gpu_s), 0) AS prev_s FROM fleet_daily f
    WHERE f.component = g.component AND f.day >= %(prev)s AND f.day < %(lo)s {FILTERS_F}) p
LEFT JOIN LATERAL (
    SELECT e.key AS evidence, sum(e.value::int) AS evidence_n
    FROM fleet_daily_jobs f CROSS JOIN LATERAL jsonb_each_text(f.evidence) AS e
    WHERE f.component = g.component AND f.day >= %(lo)s AND f.day < %(hi)s {FILTERS_F}
    GROUP BY e.key ORDER BY 2 DESC, 1 LIMIT 1) ev ON true
ORDER BY g.gpu_s DESC, g.component
"""

# Layers from fleet_layer (one row per job, day and layer: a few per job), in single-pass hash aggregates.
LAYER_SQL = f"""
WITH w AS MATERIALIZED (
    SELECT job, layer, slow_steps, gpu_s, first_seen, last_seen, evidence, evidence_n, day >= %(lo)s AS cur
    FROM fleet_layer WHERE day >= %(prev)s AND day < %(hi)s AND (%(layer)s::text IS NULL OR layer = %(layer)s)
),
pj AS (
    SELECT layer, job, sum(gpu_s) AS gs, sum(slow_steps) AS n, min(first_seen) AS f, max(last_seen) AS l
    FROM w WHERE cur GROUP BY layer, job
),
g AS (
    SELECT layer, sum(gs) AS gpu_s, count(*) AS jobs, sum(n) AS slow_steps, min(f) AS first_seen,
           max(l) AS last_seen
    FROM pj GROUP BY layer HAVING sum(gs) > 0 ORDER BY 2 DESC, layer LIMIT %(limit)s
),
pv AS (SELECT layer, sum(gpu_s) AS prev_s FROM w WHERE NOT cur GROUP BY layer),
wj AS (
    SELECT layer, jsonb_agg(jsonb_build_object('job', job, 'gpu_hours', gs / 3600.0, 'slow_steps', n) ORDER BY rn)
               AS worst
    FROM (SELECT *, row_number() OVER (PARTITION BY layer ORDER BY gs DESC, job COLLATE "C") AS rn FROM pj) x
    WHERE rn <= {WORST_JOBS} GROUP BY layer
),
ev AS (
    SELECT DISTINCT ON (layer) layer, evidence, n AS evidence_n
    FROM (SELECT layer, evidence, sum(evidence_n) AS n FROM w WHERE cur AND evidence IS NOT NULL
          GROUP BY layer, evidence) x
    ORDER BY layer, n DESC, evidence
)
SELECT g.layer AS key, g.*, coalesce(pv.prev_s, 0) AS prev_s, NULL AS kind, ev.evidence, ev.evidence_n, wj.worst
FROM g LEFT JOIN pv USING (layer) LEFT JOIN wj USING (layer) LEFT JOIN ev USING (layer)
ORDER BY g.gpu_s DESC, g.layer
"""


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


def _ceil_day(t: datetime) -> datetime:
    u = t.astimezone(UTC)
    d = datetime(u.year, u.month, u.day, tzinfo=UTC)
    return d if d == u else d + DAY


def ranking(conn: psycopg.Connection, *, by: Literal["component", "layer"], window: Window, layer: str | None,
            kind: str | None, limit: int, only: str | None = None) -> list[dict[str, Any]]:
    """Components (or layers) by GPU-hours lost in the window, worst first, at most ``limit``."""
    days = spans(window.lo, _ceil_day(window.hi))
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        # JIT compiles these small plans for longer (~200 ms) than they run
        cur.execute("SET LOCAL jit = off")
        # Never prepared: psycopg prepares a statement on its 5th run on a connection, and PostgreSQL
        # then tends to a generic plan, blind to the window's spans and the limit: on the 1,000-job
        # bench 147 ms of server CPU per ranking where the plan made for the values takes 26 ms.
        rows = cur.execute(COMPONENT_SQL if by == "component" else LAYER_SQL,
                           {"lo": window.lo, "hi": window.hi, "prev": window.prev, "layer": layer,
                            "kind": kind if by == "component" else None, "limit": limit, "only": only,
                            "levels": [lv for lv, _ in days], "starts": [st for _, st in days]},
                           prepare=False).fetchall()
    return [_row(r, by) for r in rows]


INCIDENT_ROWS_SQL = """
-- the `limit` jobs that saw the component last: the latest `limit` incidents (by end) are all theirs
WITH j AS (SELECT job FROM fleet_ledger WHERE component = %(c)s AND day >= %(lo)s AND day < %(hi)s
           GROUP BY job ORDER BY max(last_seen) DESC, job LIMIT %(limit)s)
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
    """Runs of slow steps blamed on the component, per job, the latest ``limit`` (by end) first: steps
    at most ``gap_steps`` apart are one incident. Each with its job, steps, times, GPU-hours, evidence
    counts and the component's own counters (max value against baseline over the run)."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(INCIDENT_ROWS_SQL, {"c": component, "lo": window.lo, "hi": window.hi,
                                               "limit": limit}).fetchall()
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
    out.sort(key=lambda i: (i["end"], i["job"]), reverse=True)
    return out[:limit]
