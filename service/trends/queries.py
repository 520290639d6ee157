"""Trend series from the hourly rollups (rollup.py): data access, keyword-only, psycopg 3.

Jobs are chosen by name and/or label containment, and grouped by one job label (``by``) or, without
one, each job is its own group. Time buckets are ``step`` seconds, a multiple of the rollup's hour,
aligned on ``from``. Per (group, bucket):

- ``comm_fraction`` = sum of comm_s / sum of step_s over the step records of the group's jobs;
- ``exposed_comm_fraction`` = sum of exposed_comm_s / sum of step_s (rollup.py defines both);
- ``collective_p50_s``/``p99_s``/``p999_s``, per op and size bucket: the hourly percentiles,
  weighted by their collective counts (exact for one job at ``step=3600``);
- ``busbw_fraction``, per op and size bucket: each hourly busbw median over the acceptance baseline
  of the job's fabric (job label ``fabric``) at the same rank count or the nearest smaller one (the
  baseline of service/acceptance), weighted by the counts of collectives that have a busbw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

Metric = Literal["comm_fraction", "exposed_comm_fraction", "collective_p50_s", "collective_p99_s",
                 "collective_p999_s", "busbw_fraction"]
METRICS: tuple[str, ...] = ("comm_fraction", "exposed_comm_fraction", "collective_p50_s", "collective_p99_s",
                            "collective_p999_s", "busbw_fraction")
ROLLUP_S = 3600
_QUANTILE_COL = {"collective_p50_s": "p50_s", "collective_p99_s": "p99_s", "collective_p999_s": "p999_s"}


@dataclass(frozen=True)
class TrendQuery:
    metric: str
    from_ts: datetime
    to_ts: datetime
    step_s: int
    job: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    by: str | None = None
    op: str | None = None
    bucket: int | None = None


_JOBS = """j AS (
    SELECT name AS job, CASE WHEN %(by)s::text IS NULL THEN name ELSE labels ->> %(by)s END AS grp,
           labels ->> 'fabric' AS fabric
    FROM jobs WHERE (%(job)s::text IS NULL OR name = %(job)s) AND labels @> %(labels)s
)"""
_TIME = "date_bin(make_interval(secs => %(step)s), r.hour, %(from)s)"
_RANGE = "r.hour >= %(from)s AND r.hour < %(to)s"  # from: on the hour (the route aligns it)
_COLL_FILTER = "(%(op)s::text IS NULL OR r.op = %(op)s) AND (%(bucket)s::bigint IS NULL OR r.bucket = %(bucket)s)"

_STEP_SQL = f"""WITH {_JOBS}
SELECT j.grp, NULL::text AS op, NULL::bigint AS bucket, {_TIME} AS ts,
       sum(r.{{num}}) / nullif(sum(r.step_s), 0) AS value, sum(r.rank_steps)::bigint AS samples,
       count(DISTINCT r.job) AS jobs
FROM step_rollup r JOIN j USING (job)
WHERE {_RANGE}
GROUP BY 1, 4 ORDER BY 1, 4"""

_QUANTILE_SQL = f"""WITH {_JOBS}
SELECT j.grp, r.op, r.bucket, {_TIME} AS ts,
       sum(r.{{col}} * r.count) / nullif(sum(r.count), 0) AS value, sum(r.count)::bigint AS samples,
       count(DISTINCT r.job) AS jobs
FROM collective_rollup r JOIN j USING (job)
WHERE {_RANGE} AND {_COLL_FILTER}
GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"""


def _busbw_sql() -> str:
    from fabricscope.service.acceptance.store import BASELINE_CTES

    # the baseline is looked up once per (fabric, op, bucket, group size), not once per rollup row
    return f"""WITH {BASELINE_CTES}, {_JOBS},
r AS MATERIALIZED (
    SELECT j.grp, j.fabric, r.job, r.op, r.bucket, r.group_size, r.hour, r.busbw_count AS count, r.busbw_p50_gbps
    FROM collective_rollup r JOIN j USING (job)
    WHERE {_RANGE} AND {_COLL_FILTER} AND r.busbw_p50_gbps IS NOT NULL AND j.fabric IS NOT NULL
),
k AS (SELECT DISTINCT fabric, op, bucket, group_size FROM r),
kb AS (
    SELECT k.*, base.busbw_gbps FROM k
    JOIN LATERAL (SELECT b.busbw_gbps FROM baseline b
                  WHERE b.fabric = k.fabric AND b.op = k.op AND b.bucket = k.bucket AND b.ranks <= k.group_size
                    AND b.busbw_gbps > 0
                  ORDER BY b.ranks DESC LIMIT 1) base ON true
)
SELECT r.grp, r.op, r.bucket, {_TIME} AS ts,
       sum(r.busbw_p50_gbps / kb.busbw_gbps * r.count) / nullif(sum(r.count), 0) AS value,
       sum(r.count)::bigint AS samples, count(DISTINCT r.job) AS jobs
FROM r JOIN kb USING (fabric, op, bucket, group_size)
GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"""


def _sql(metric: str) -> str:
    if metric == "comm_fraction":
        return _STEP_SQL.format(num="comm_s")
    if metric == "exposed_comm_fraction":
        return _STEP_SQL.format(num="exposed_comm_s")
    if metric in _QUANTILE_COL:
        return _QUANTILE_SQL.format(col=_QUANTILE_COL[metric])
    if metric == "busbw_fraction":
        return _busbw_sql()
    raise ValueError(f"unknown metric {metric!r}")


def _params(q: TrendQuery) -> dict[str, Any]:
    return {"by": q.by, "job": q.job, "labels": Jsonb(q.labels), "step": q.step_s, "from": q.from_ts,
            "to": q.to_ts, "op": q.op, "bucket": q.bucket,
            # the acceptance baseline over every fabric, median of the accepted runs
            "fabric": None, "ranks": None, "nodes": None, "stat": "median"}


def trend(conn: psycopg.Connection, *, query: TrendQuery, max_series: int) -> dict[str, Any]:
    """``{"series": [{"group", "op", "bucket", "points": [{"ts", "value", "samples", "jobs"}]}], "truncated"}``;
    series with the most samples first, at most ``max_series``."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_sql(query.metric), _params(query)).fetchall()
    series: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = (r["grp"], r["op"], r["bucket"])
        s = series.setdefault(key, {"group": r["grp"], "points": [], "_n": 0})
        if query.metric not in ("comm_fraction", "exposed_comm_fraction"):
            s["op"], s["bucket"] = r["op"], r["bucket"]
        s["points"].append({"ts": r["ts"], "value": None if r["value"] is None else float(r["value"]),
                            "samples": int(r["samples"]), "jobs": int(r["jobs"])})
        s["_n"] += int(r["samples"])
    ordered = sorted(series.values(), key=lambda s: (-s["_n"], str(s["group"]), str(s.get("op")),
                                                     s.get("bucket") or 0))
    for s in ordered:
        del s["_n"]
    return {"series": ordered[:max_series], "truncated": len(ordered) > max_series}


def jobs_in_scope(conn: psycopg.Connection, *, job: str | None, labels: dict[str, str],
                  by: str | None) -> list[dict[str, Any]]:
    """The chosen jobs with their group, labels and start (first step's start, else registration)."""
    sql = f"""WITH {_JOBS}
SELECT j.job, j.grp, jb.labels,
       coalesce((SELECT min(s.start_ts) FROM steps s
                 WHERE s.job = j.job AND s.step = (SELECT min(step) FROM steps WHERE job = j.job)),
                jb.created_at) AS started
FROM j JOIN jobs jb ON jb.name = j.job
ORDER BY started, j.job"""
    params = {"by": by, "job": job, "labels": Jsonb(labels)}
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, params).fetchall()
