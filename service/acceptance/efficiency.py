"""What a job's collectives achieve against the fabric's acceptance baseline, in one SQL statement
(after an index lookup of which hours in the window the rollup holds).

Per collective record (one rank's view of one collective), with n = its group size (the job's
world size where the hook did not know it: job_ranks, else the job label ``world_size``)::

    size  = nccl_size(op, bytes, n)           all-gather: bytes*n, the others: bytes
    busbw = size / duration / 1e9 * k*(n-m)/n  (fabricscope.core.busbw.FACTOR_FORM)

The duration is the collective's own time, not the rank's: a rank's record runs from its own
arrival, so it holds the wait for the last rank to arrive (skew from compute, data loading, a
straggler), and a healthy job's busbw read 0.33-0.51 of a baseline measured by nccl-tests, which
starts every rank together. Per (group, seq, op, step) the collective runs from the last rank's arrival to
its completion; the last rank to arrive waits for nobody, so its record, the shortest of the
collective's records, is that time. Taking the shortest duration rather than subtracting timestamps
of different hosts keeps host clock offsets out of it. Every record of the collective gets that time
(the counts and weights stay per record); a record without ``seq`` (imports that carry none) keeps its
own duration. A slow link or NIC still shows: it lengthens the collective on every rank, the last
one included, while a straggler's compute no longer reads as low bandwidth.

Achieved = median and p10 of busbw per (op, size bucket, group size). The baseline is the
acceptance baseline (store.BASELINE_CTES) of the same fabric (``?fabric=``, else the job label
``fabric``), op and bucket at the same rank count, else the nearest smaller one (``scale`` says
which); ``fraction`` = achieved median / baseline. Ops without bytes (barrier), unknown ops, groups of
one rank (busbw 0 by definition) and records over 1 TiB or 4Mi ranks (corrupt) are left out.

Closed hours come from the hourly rollup (collective_rollup, service/trends/rollup.py): an hour that
has ended, lies fully inside the window, was rolled (rollup_hours) and has not been marked since
(rollup_pending) contributes its busbw_count, busbw_bytes and hourly p50/p10. The rest of the window
(the open hour, hours not rolled or marked again, the partial hours at its edges) is read from the
raw records, each of weight 1. Per (op, bucket, group size) the median is then the weighted
percentile of the hourly p50s (weight: the hour's count) and the raw values, the p10 the same over
the hourly p10s: percentile_cont over the list in which each hourly value is repeated count times
(:data:`_WEIGHTED`). With rolled hours this is exact where each hour's values are alike, and otherwise
an approximation of the percentile over all records (it cannot see the spread within an hour); a
window with no rolled hour is answered exactly, by percentile_cont over its raw records.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from fabricscope.core.busbw import FACTOR_FORM, HOOK_OPS, OUTPUT_SIZED, OWN_TIME_SQL
from fabricscope.service.acceptance.store import BASELINE_CTES, Stat

_HOOK = sorted(HOOK_OPS)
FACTORS = {"f_op": _HOOK, "f_canon": [HOOK_OPS[o] for o in _HOOK],
           "f_k": [FACTOR_FORM[HOOK_OPS[o]][0] for o in _HOOK], "f_m": [FACTOR_FORM[HOOK_OPS[o]][1] for o in _HOOK],
           "f_out": [HOOK_OPS[o] in OUTPUT_SIZED for o in _HOOK]}

# Every CTE of both queries below; the baseline CTEs run with no filter (a few hundred rows), the
# join picks the job's fabric.
_RECORDS = f"""WITH {BASELINE_CTES},
f AS (SELECT * FROM unnest(%(f_op)s::text[], %(f_canon)s::text[], %(f_k)s::int[], %(f_m)s::int[],
                           %(f_out)s::bool[]) AS f(op, canon, k, m, outn)),
job AS (
    SELECT coalesce(%(job_fabric)s::text, (SELECT labels ->> 'fabric' FROM jobs WHERE name = %(job)s)) AS fabric,
           coalesce((SELECT nullif(count(*), 0)::int FROM job_ranks WHERE job = %(job)s),
                    (SELECT CASE WHEN labels ->> 'world_size' ~ '^[0-9]{{1,7}}$' THEN (labels ->> 'world_size')::int
                            END FROM jobs WHERE name = %(job)s)) AS world
),
@CTES@rec AS (
    SELECT c.step, c.rank, c.start_ts, f.canon AS op, coalesce(c.group_size, job.world) AS n,
           CASE WHEN f.outn THEN c.bytes * coalesce(c.group_size, job.world) ELSE c.bytes END AS size,
           {OWN_TIME_SQL} AS duration_s, f.k, f.m  -- the collective's own time (module doc)
    FROM @FROM@ JOIN f ON f.op = c.op CROSS JOIN job
    WHERE c.job = %(job)s AND c.bytes > 0 AND c.bytes < 1099511627776 AND c.duration_s > 0
      AND coalesce(c.group_size, job.world) BETWEEN 2 AND 4194304 @WHERE@
),
bw AS (
    SELECT step, rank, start_ts, op, n, size,
           (1::bigint << greatest(length(ltrim(size::bit(64)::text, '0')) - 1, 0)) AS bucket,  -- busbw.size_bucket
           size / duration_s / 1e9 * (k * (n - m))::float8 / n AS busbw
    FROM rec
)"""

# (op, bucket, n) -> the baseline at the same rank count, else the nearest smaller one
_MATCH = """LEFT JOIN LATERAL (
    SELECT b.busbw_gbps, b.ranks, b.runs FROM baseline b, job
    WHERE b.fabric = job.fabric AND b.op = {t}.op AND b.bucket = {t}.bucket AND b.ranks <= {t}.n AND b.busbw_gbps > 0
    ORDER BY b.ranks DESC LIMIT 1) base ON true"""

# The closed hours fully inside [from, to) that were rolled and no batch has marked since, and the
# raw ranges around them (gaps: the open hour, marked hours, the window's partial edge hours). The
# raw records are read per gap (LATERAL: an index range each), never over the rolled hours; OFFSET 0
# keeps the planner from flattening the LATERAL into one scan of all the job's raw rows.
_ROLLED = """rolled AS (
    SELECT h.hour FROM rollup_hours h
    WHERE h.job = %(job)s AND h.hour >= coalesce(%(from)s::timestamptz, '-infinity')
      AND h.hour + INTERVAL '1 hour' <= least(coalesce(%(to)s::timestamptz, 'infinity'), now())
      AND NOT EXISTS (SELECT 1 FROM rollup_pending p WHERE p.job = h.job AND p.hour = h.hour)
)"""
_SPLIT = _ROLLED + """,
gaps AS (
    SELECT lo, hi FROM (
        SELECT coalesce(lag(hour) OVER (ORDER BY hour) + INTERVAL '1 hour',
                        coalesce(%(from)s::timestamptz, '-infinity')) AS lo, hour AS hi FROM rolled
        UNION ALL
        SELECT coalesce(max(hour) + INTERVAL '1 hour', coalesce(%(from)s::timestamptz, '-infinity')),
               coalesce(%(to)s::timestamptz, 'infinity') FROM rolled) x
    WHERE lo < hi
),
"""

_GAP_SCAN = """gaps g CROSS JOIN LATERAL (
        SELECT * FROM collectives c WHERE c.job = %(job)s AND c.start_ts >= g.lo AND c.start_ts < g.hi OFFSET 0) c"""

# Weighted percentile_cont: over the list in which each value v of weight w appears w times, sorted,
# the value at 0-based position r = q(W - 1) (W = the sum of weights) interpolated between positions
# floor(r) and ceil(r), as PostgreSQL's percentile_cont does. The value at position j is that of the
# first item (in value order) whose running sum of weights exceeds j. A raw record (kind 0) counts
# for both percentiles, a rolled hour's p50 (kind 5) for the median only and its p10 (kind 1) for the
# p10 only, so one sort of the raw records serves both running sums.
_WEIGHTED = """items AS (
    SELECT op, bucket, n, busbw AS v, 1::bigint AS w, size::float8 AS sz, 0 AS kind FROM bw
    UNION ALL
    SELECT r.op, r.bucket, r.group_size, x.v, r.busbw_count, x.sz, x.kind
    FROM collective_rollup r,  -- the hours as one array: an index scan, whatever the tables' statistics
         LATERAL (VALUES (r.busbw_p50_gbps, r.busbw_bytes, 5), (r.busbw_p10_gbps, 0, 1)) x(v, sz, kind)
    WHERE r.job = %(job)s AND r.hour = ANY(ARRAY(SELECT hour FROM rolled))
      AND r.busbw_count > 0 AND r.busbw_p50_gbps IS NOT NULL AND r.busbw_p10_gbps IS NOT NULL
      AND r.op = ANY(%(f_canon)s::text[]) AND r.group_size BETWEEN 2 AND 4194304
),
run AS (
    SELECT op, bucket, n, v, w, sz, kind,
           sum(w) FILTER (WHERE kind <> 1) OVER (g ORDER BY v ROWS UNBOUNDED PRECEDING) AS c50,
           sum(w) FILTER (WHERE kind <> 5) OVER (g ORDER BY v ROWS UNBOUNDED PRECEDING) AS c10,
           (sum(w) FILTER (WHERE kind <> 1) OVER g - 1)::float8 AS w1
    FROM items WINDOW g AS (PARTITION BY op, bucket, n)
),
ends AS (
    SELECT op, bucket, n, sum(w) FILTER (WHERE kind <> 1)::bigint AS collectives, sum(sz) AS bytes,
           0.5::float8 * max(w1) AS r50, 0.1::float8 * max(w1) AS r10,
           min(v) FILTER (WHERE kind <> 1 AND c50 > floor(0.5::float8 * w1)) AS lo50,
           min(v) FILTER (WHERE kind <> 1 AND c50 > ceil(0.5::float8 * w1)) AS hi50,
           min(v) FILTER (WHERE kind <> 5 AND c10 > floor(0.1::float8 * w1)) AS lo10,
           min(v) FILTER (WHERE kind <> 5 AND c10 > ceil(0.1::float8 * w1)) AS hi10
    FROM run GROUP BY op, bucket, n
),
ach AS (
    SELECT op, bucket, n, collectives, bytes,
           lo50 + (hi50 - lo50) * (r50 - floor(r50)) AS median, lo10 + (hi10 - lo10) * (r10 - floor(r10)) AS p10
    FROM ends
)"""

_EXACT = """ach AS (
    SELECT op, bucket, n, count(*) AS collectives, sum(size)::float8 AS bytes,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY busbw) AS median,
           percentile_cont(0.1) WITHIN GROUP (ORDER BY busbw) AS p10
    FROM bw GROUP BY op, bucket, n
)"""

_ANSWER = f"""
SELECT job.fabric, x.* FROM job LEFT JOIN (  -- one row even without collectives: the fabric used
    SELECT a.op, a.bucket, a.n AS group_size, a.collectives, a.bytes, a.median AS busbw_median_gbps,
           a.p10 AS busbw_p10_gbps, base.busbw_gbps AS baseline_busbw_gbps, base.ranks AS baseline_ranks,
           base.runs AS baseline_runs, a.median / base.busbw_gbps AS fraction, a.p10 / base.busbw_gbps AS fraction_p10
    FROM ach a {_MATCH.format(t="a")}) x ON true
ORDER BY x.op, x.group_size, x.bucket"""

# Without a rolled hour in the window: percentile_cont over the raw records (one sort per group; the
# weighted form gives the same numbers at about twice the cost).
_RAW_ONLY = _RECORDS.replace("@CTES@", "").replace("@FROM@", "collectives c").replace("@WHERE@", """
      AND (%(from)s::timestamptz IS NULL OR c.start_ts >= %(from)s)
      AND (%(to)s::timestamptz IS NULL OR c.start_ts < %(to)s)""") + ",\n" + _EXACT + _ANSWER
_WITH_ROLLUP = (_RECORDS.replace("@CTES@", _SPLIT).replace("@FROM@", _GAP_SCAN).replace("@WHERE@", "")
                + ",\n" + _WEIGHTED + _ANSWER)
_ANY_ROLLED = f"WITH {_ROLLED}\nSELECT EXISTS (SELECT 1 FROM rolled)"


def _params(job: str, fabric: str | None, stat: Stat) -> dict[str, Any]:
    return {**FACTORS, "job": job, "job_fabric": fabric, "fabric": None, "op": None, "ranks": None, "nodes": None,
            "stat": stat}


def job_efficiency(conn: psycopg.Connection, *, job: str, fabric: str | None, from_ts: datetime | None,
                   to_ts: datetime | None, stat: Stat = "median") -> dict[str, Any]:
    """``{"fabric", "rows": [...]}``: achieved vs baseline per (op, bucket, group size)."""
    params = {**_params(job, fabric, stat), "from": from_ts, "to": to_ts}
    rolled = conn.execute(_ANY_ROLLED, params).fetchone()
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_WITH_ROLLUP if rolled and rolled[0] else _RAW_ONLY, params).fetchall()
    out_fabric = rows[0]["fabric"] if rows else None
    rows = [r for r in rows if r["op"] is not None]
    for r in rows:
        del r["fabric"]
        gs, br = r["group_size"], r["baseline_ranks"]
        r["scale"] = None if br is None else ("same" if br == gs else "nearest_smaller")
    return {"fabric": out_fabric, "rows": rows}


_STEPS = _RECORDS.replace("@CTES@", "").replace("@FROM@", "collectives c").replace(
    "@WHERE@", "AND c.step > %(after)s AND c.step <= %(after)s + %(max_steps)s") + f""",
keys AS (SELECT DISTINCT op, bucket, n FROM bw),
matched AS (SELECT k.op, k.bucket, k.n, base.busbw_gbps FROM keys k {_MATCH.format(t="k")})
SELECT bw.step, count(DISTINCT bw.rank) AS ranks, extract(epoch FROM min(bw.start_ts))::float8 AS start,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY bw.busbw / m.busbw_gbps)
           FILTER (WHERE m.busbw_gbps IS NOT NULL) AS fraction,
       count(m.busbw_gbps) AS compared
FROM bw JOIN matched m USING (op, bucket, n)
GROUP BY bw.step ORDER BY bw.step"""


def step_fractions(conn: psycopg.Connection, *, job: str, after: int, max_steps: int,
                   stat: Stat = "median") -> list[tuple[int, int, float, float | None, int]]:
    """Per step after ``after`` (at most ``max_steps``): (step, ranks seen, start epoch s, fraction,
    records compared).
    The step's fraction is the median over its records with a baseline of achieved/baseline busbw."""
    params = {**_params(job, None, stat), "after": after, "max_steps": max_steps}
    rows = conn.execute(_STEPS, params).fetchall()
    return [(int(s), int(n), float(t), None if f is None else float(f), int(k)) for s, n, t, f, k in rows]


def report_section(conn: psycopg.Connection, *, job: str, from_ts: datetime | None, to_ts: datetime | None,
                   threshold: float) -> dict[str, Any]:
    """The job report's compact ``efficiency``: fraction per op/bucket/group size, and a warning line
    per row below ``threshold`` (settings.alert_busbw_fraction). One query."""
    eff = job_efficiency(conn, job=job, fabric=None, from_ts=from_ts, to_ts=to_ts)
    rows = [{k: r[k] for k in ("op", "bucket", "group_size", "collectives", "busbw_median_gbps",
                               "baseline_busbw_gbps", "fraction")} for r in eff["rows"]]
    warnings = [f"{r['op']} {r['bucket']} B bucket on {r['group_size']} ranks: {r['busbw_median_gbps']:.3g} GB/s "
                f"is {r['fraction']:.2f} of the acceptance baseline ({r['baseline_busbw_gbps']:.3g} GB/s, "
                f"fabric {eff['fabric']}), below {threshold:g}"
                for r in rows if r["fraction"] is not None and r["fraction"] < threshold]
    return {"fabric": eff["fabric"], "threshold": threshold, "compared": sum(r["fraction"] is not None for r in rows),
            "rows": rows, "warnings": warnings}
