"""The "Capacity" dashboard (issue 19): trends across jobs from the hourly rollups.

Written by tools/build_dashboards.py like the others (this module only holds its panels). It reads
`step_rollup` and `collective_rollup` (service/trends/rollup.py defines every column), the job
labels the training hook adds (`model`, `torch_version`, `nccl_version`, `cuda_version`), and the
acceptance baseline (`acceptance_runs`/`acceptance_rows`, the same rule as
service/acceptance/store.py: per accepted run the best out-of-place busbw per size bucket, the
median over runs per fabric, op, bucket and rank count; a job is compared at its own rank count or
the nearest smaller one).

Rollup rows are hours: a row counts when its hour overlaps the time range, hence the
`hour > $__timeFrom() - 1 hour` filters instead of `$__timeFilter`.
"""

from __future__ import annotations

from typing import Any

from tools.build_dashboards import (
    Layout,
    annotation,
    by_name,
    dashboard,
    query_var,
    stat,
    table,
    target,
    timeseries,
)

MODELS = "${model:sqlstring}"
OPS = "${op:sqlstring}"
GROUP = "coalesce(j.labels->>'model', j.name)"  # a job without a model label is its own line
HOURS = "r.hour > $__timeFrom()::timestamptz - INTERVAL '1 hour' AND r.hour <= $__timeTo()"
SIZE = ("CASE WHEN r.bucket >= 1073741824 THEN (r.bucket / 1073741824) || ' GiB' "
        "WHEN r.bucket >= 1048576 THEN (r.bucket / 1048576) || ' MiB' "
        "WHEN r.bucket >= 1024 THEN (r.bucket / 1024) || ' KiB' ELSE r.bucket || ' B' END")

BASELINE_CTE = """per_run AS (
  SELECT ar.fabric, ar.op, ar.ranks, ar.id, w.bucket, max(w.busbw_gbps) AS busbw
  FROM acceptance_runs ar JOIN acceptance_rows w ON w.run_id = ar.id
  WHERE w.placement = 'out_of_place' AND coalesce(ar.wrong_total, 0) = 0
    AND NOT EXISTS (SELECT 1 FROM acceptance_rows x WHERE x.run_id = ar.id AND x.wrong > 0)
  GROUP BY ar.fabric, ar.op, ar.ranks, ar.id, w.bucket),
baseline AS (
  SELECT fabric, op, bucket, ranks, percentile_cont(0.5) WITHIN GROUP (ORDER BY busbw) AS busbw_gbps
  FROM per_run GROUP BY fabric, op, bucket, ranks)"""


def _step_ts(col: str) -> str:
    return f"""
SELECT $__timeGroupAlias(r.hour, $__interval), {GROUP} AS metric, sum(r.{col}) / nullif(sum(r.step_s), 0) AS value
FROM step_rollup r JOIN jobs j ON j.name = r.job
WHERE {HOURS} AND {GROUP} IN ({MODELS})
GROUP BY 1, 2 ORDER BY 1"""


VERSION_KEYS = ("torch_version", "nccl_version", "cuda_version")
_PREV = """(SELECT p.labels->>'{k}' FROM j p WHERE p.grp = j0.grp AND p.labels ? '{k}'
          AND (p.started, p.name) < (j0.started, j0.name) ORDER BY p.started DESC, p.name DESC LIMIT 1)"""
VERSIONS_SQL = f"""
WITH j AS (
  SELECT name, labels, coalesce(labels->>'model', name) AS grp,
         coalesce((SELECT min(s.start_ts) FROM steps s
                   WHERE s.job = jobs.name AND s.step = (SELECT min(step) FROM steps WHERE job = jobs.name)),
                  created_at) AS started
  FROM jobs WHERE coalesce(labels->>'model', name) IN ({MODELS})),
v AS (
  SELECT j0.*, {", ".join(f"{_PREV.format(k=k)} AS prev_{k}" for k in VERSION_KEYS)}
  FROM j j0)
SELECT started AS "time",
       grp || ': ' || concat_ws(', ', {", ".join(
           f"CASE WHEN prev_{k} <> labels->>'{k}' THEN '{k.removesuffix('_version')} ' || prev_{k} || ' → ' || "
           f"(labels->>'{k}') END" for k in VERSION_KEYS)}) || ' (' || name || ')' AS text,
       'version_change' AS tags
FROM v WHERE started BETWEEN $__timeFrom() AND $__timeTo()
  AND ({" OR ".join(f"prev_{k} <> labels->>'{k}'" for k in VERSION_KEYS)})
ORDER BY 1"""

# The API's defaults (service/settings.py trends_jump_*; the test checks they still agree).
JUMP_THRESHOLD, JUMP_WINDOW, JUMP_MIN_POINTS = 0.25, 24, 3
# service/trends/annotations.comm_jumps on hourly buckets: the trailing window counts buckets with
# data and, as the API, looks back no further than `window` hours before the range; PostgreSQL has
# no windowed percentile, hence the LATERAL median.
JUMPS_SQL = f"""
WITH b AS (
  SELECT {GROUP} AS grp, r.hour, sum(r.comm_s) / sum(r.step_s) AS v
  FROM step_rollup r JOIN jobs j ON j.name = r.job
  WHERE r.hour > $__timeFrom()::timestamptz - INTERVAL '{JUMP_WINDOW + 1} hours' AND r.hour < $__timeTo()
    AND {GROUP} IN ({MODELS})
  GROUP BY 1, 2 HAVING sum(r.step_s) > 0),
m AS (
  SELECT b.*, t.med, t.n,
         (t.n >= {JUMP_MIN_POINTS} AND t.med > 0 AND b.v > t.med * {1 + JUMP_THRESHOLD}) AS jump
  FROM b CROSS JOIN LATERAL (
    SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY p.v) AS med, count(*) AS n
    FROM (SELECT p.v FROM b p WHERE p.grp = b.grp AND p.hour < b.hour ORDER BY p.hour DESC LIMIT {JUMP_WINDOW}) p
  ) t),
e AS (SELECT m.*, lag(m.jump) OVER (PARTITION BY m.grp ORDER BY m.hour) AS prev FROM m)
SELECT hour AS "time",
       grp || ': comm fraction ' || round(v::numeric, 3) || ' vs trailing median ' || round(med::numeric, 3)
         || ' (+' || round(((v / med - 1) * 100)::numeric) || ' %)' AS text,
       'comm_fraction_jump' AS tags
FROM e WHERE jump AND NOT coalesce(prev, false) AND hour > $__timeFrom()::timestamptz - INTERVAL '1 hour'
ORDER BY 1"""


def capacity() -> dict[str, Any]:
    lay = Layout()
    panels = [
        stat(lay, "Comm fraction of step time", f"""
SELECT sum(r.comm_s) / nullif(sum(r.step_s), 0) AS comm_fraction
FROM step_rollup r JOIN jobs j ON j.name = r.job WHERE {HOURS} AND {GROUP} IN ({MODELS})""", unit="percentunit",
             description="Collective time (barrier excluded) over step time, all chosen models and the range."),
        stat(lay, "Exposed comm fraction", f"""
SELECT sum(r.exposed_comm_s) / nullif(sum(r.step_s), 0) AS exposed_comm_fraction
FROM step_rollup r JOIN jobs j ON j.name = r.job WHERE {HOURS} AND {GROUP} IN ({MODELS})""", unit="percentunit",
             description="The union of each step's collective intervals (concurrent collectives once) over step "
                         "time."),
        stat(lay, "Steps rolled up", f"""
SELECT coalesce(sum(r.steps), 0) AS steps
FROM step_rollup r JOIN jobs j ON j.name = r.job WHERE {HOURS} AND {GROUP} IN ({MODELS})""", unit="none"),
        stat(lay, "Collectives rolled up", f"""
SELECT coalesce(sum(r.count), 0) AS collectives
FROM collective_rollup r JOIN jobs j ON j.name = r.job
WHERE {HOURS} AND {GROUP} IN ({MODELS}) AND r.op IN ({OPS})""", unit="none"),
        timeseries(lay, "Comm fraction of step time by model", [target(_step_ts("comm_s"))], unit="percentunit",
                   description="Per hour: collective seconds over step seconds of the model's jobs. Version "
                               "changes between a model's jobs, and jumps of a model's comm fraction over "
                               "its trailing 24-hour median, are annotated."),
        timeseries(lay, "Exposed (non-overlapped) comm fraction by model", [target(_step_ts("exposed_comm_s"))],
                   unit="percentunit",
                   description="Per hour: the time each step had a collective in flight, over step time."),
        timeseries(lay, "Collective p99 duration by op and size", [target(f"""
SELECT $__timeGroupAlias(r.hour, $__interval), r.op || ' ' || {SIZE} AS metric,
       sum(r.p99_s * r.count) / nullif(sum(r.count), 0) AS value
FROM collective_rollup r JOIN jobs j ON j.name = r.job
WHERE {HOURS} AND {GROUP} IN ({MODELS}) AND r.op IN ({OPS})
GROUP BY 1, 2 ORDER BY 1""")], unit="s",
                   description="Hourly p99 of each (op, size bucket), weighted by collective counts across jobs."),
        timeseries(lay, "Bus bandwidth, fraction of the acceptance baseline", [target(f"""
WITH {BASELINE_CTE}
SELECT $__timeGroupAlias(r.hour, $__interval), r.op || ' ' || {SIZE} AS metric,
       sum(r.busbw_p50_gbps / b.busbw_gbps * r.count) / nullif(sum(r.count), 0) AS value
FROM collective_rollup r JOIN jobs j ON j.name = r.job
JOIN LATERAL (SELECT busbw_gbps FROM baseline bl
              WHERE bl.fabric = j.labels->>'fabric' AND bl.op = r.op AND bl.bucket = r.bucket
                AND bl.ranks <= r.group_size AND bl.busbw_gbps > 0
              ORDER BY bl.ranks DESC LIMIT 1) b ON true
WHERE {HOURS} AND {GROUP} IN ({MODELS}) AND r.op IN ({OPS}) AND r.busbw_p50_gbps IS NOT NULL
GROUP BY 1, 2 ORDER BY 1""")], unit="percentunit",
                   description="Median nccl-tests busbw of the jobs' collectives over the baseline of their fabric "
                               "(job label `fabric`) at the same rank count or the nearest smaller one."),
        table(lay, "Collective durations per op and size", f"""
SELECT r.op, {SIZE} AS size, r.bucket, r.group_size, sum(r.count)::bigint AS collectives,
       sum(r.p50_s * r.count) / sum(r.count) AS p50_s, sum(r.p99_s * r.count) / sum(r.count) AS p99_s,
       sum(r.p999_s * r.count) / sum(r.count) AS p999_s,
       sum(r.busbw_p50_gbps * r.count) / nullif(sum(r.count) FILTER (WHERE r.busbw_p50_gbps IS NOT NULL), 0)
         AS busbw_p50_gbps
FROM collective_rollup r JOIN jobs j ON j.name = r.job
WHERE {HOURS} AND {GROUP} IN ({MODELS}) AND r.op IN ({OPS})
GROUP BY r.op, r.bucket, r.group_size ORDER BY r.op, r.bucket, r.group_size LIMIT 200""", w=24, h=9,
              description="Over the range: hourly percentiles weighted by counts; busbw in GB/s (1e9, as "
                          "nccl-tests).",
              overrides=[by_name("p50_s", ("unit", "s")), by_name("p99_s", ("unit", "s")),
                         by_name("p999_s", ("unit", "s")), by_name("bucket", ("custom.hidden", True))]),
    ]
    variables = [
        query_var("model", "Model", "SELECT DISTINCT coalesce(labels->>'model', name) FROM jobs ORDER BY 1",
                  multi=True),
        query_var("op", "Op", "SELECT DISTINCT op FROM collective_rollup ORDER BY 1", multi=True),
    ]
    annotations = [annotation("Version changes", VERSIONS_SQL, "purple"),
                   annotation("Comm fraction jumps", JUMPS_SQL, "orange")]
    return dashboard("fabricscope-capacity", "fabricscope / Capacity",
                     "Communication overhead, collective tails and bus bandwidth against acceptance, across jobs "
                     "and versions (hourly rollups).", panels, variables, annotations, time_from="now-7d")
