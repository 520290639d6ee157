"""The "Fleet" dashboard (issue 48): GPU-hours lost per component and layer across all jobs.

Written by tools/build_dashboards.py like the others (this module only holds its panels). It reads
the fleet ledger (migration 0012, service/fleet/rollup.py) with the API's rules
(service/fleet/queries.py): whole UTC days, from the day of the range's start up to its end; a
component's layer is the one it lost most under; jobs are distinct jobs; ties by name.
tests/fleet/test_dashboard.py checks the panels against GET /v1/fleet/components and /layers.
"""

from __future__ import annotations

from typing import Any

from tools.build_dashboards import Layout, dashboard, layer_colors, query_var, table, target, timeseries

COMPONENT = "${component:sqlstring}"
# The API's window: from the UTC midnight of the range's start (no date_bin: portable SQL only)
DAYS = ("{t}day >= (date_trunc('day', $__timeFrom()::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') "
        "AND {t}day < $__timeTo()")

TOP_COMPONENTS_SQL = f"""
SELECT f.component, (array_agg(f.layer ORDER BY f.gpu_s DESC))[1] AS layer,
       sum(f.gpu_s) / 3600.0 AS gpu_hours,
       (SELECT count(DISTINCT u.job) FROM fleet_daily_jobs d CROSS JOIN LATERAL unnest(d.job_names) AS u(job)
        WHERE d.component = f.component AND {DAYS.format(t="d.")}) AS jobs,
       sum(f.slow_steps) AS slow_steps, min(f.first_seen) AS first_seen, max(f.last_seen) AS last_seen
FROM fleet_daily f
WHERE f.component <> '' AND {DAYS.format(t="f.")}
GROUP BY f.component HAVING sum(f.gpu_s) > 0
ORDER BY sum(f.gpu_s) DESC, f.component LIMIT 20"""

LAYERS_OVER_TIME_SQL = f"""
SELECT day AS "time", layer AS metric, sum(gpu_s) / 3600.0 AS value
FROM fleet_layer WHERE {DAYS.format(t="")}
GROUP BY day, layer ORDER BY 1, 2"""

TIMELINE_SQL = f"""
SELECT day AS "time", job AS metric, gpu_s / 3600.0 AS value
FROM fleet_ledger WHERE component IN ({COMPONENT}) AND {DAYS.format(t="")}
ORDER BY 1, 2"""

INCIDENT_JOBS_SQL = f"""
SELECT job, layer, sum(slow_steps) AS slow_steps, sum(gpu_s) / 3600.0 AS gpu_hours, min(first_seen) AS first_seen,
       max(last_seen) AS last_seen,
       (array_agg(evidence ORDER BY evidence_n DESC) FILTER (WHERE evidence IS NOT NULL))[1] AS evidence
FROM fleet_ledger WHERE component IN ({COMPONENT}) AND {DAYS.format(t="")}
GROUP BY job, layer ORDER BY min(first_seen), job"""


def fleet() -> dict[str, Any]:
    lay = Layout()
    panels = [
        table(lay, "Top components by GPU-hours lost", TOP_COMPONENTS_SQL, w=24, h=9,
              description="Slow steps' excess over baseline x the job's ranks, split by cause shares, per component "
                          "over the range's whole UTC days (GET /v1/fleet/components). Repair or RMA from the top."),
        timeseries(lay, "Lost GPU-hours per layer (per day)", [target(LAYERS_OVER_TIME_SQL)], unit="h", w=24,
                   bars=True, stack=True, overrides=layer_colors(),
                   description="GET /v1/fleet/layers, one bar per UTC day."),
        timeseries(lay, "Incident timeline: the chosen component's GPU-hours lost per job and day",
                   [target(TIMELINE_SQL)], unit="h", w=12, bars=True, stack=True,
                   description="GET /v1/fleet/components/{component} lists the incidents step by step."),
        table(lay, "The chosen component's jobs", INCIDENT_JOBS_SQL, w=12,
              description="Per job: slow steps blamed on the component, GPU-hours, when, and the evidence seen most."),
    ]
    variables = [query_var("component", "Component", """
SELECT component FROM fleet_daily WHERE component <> '' GROUP BY component ORDER BY sum(gpu_s) DESC, component
LIMIT 200""")]
    return dashboard("fabricscope-fleet", "fabricscope: Fleet",
                     "GPU-hours lost per component and layer across all jobs: what to repair first.", panels,
                     variables, [], time_from="now-30d")
