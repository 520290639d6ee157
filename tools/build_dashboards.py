"""Write the Grafana dashboards in `dashboards/json/` from the panel definitions below.

The SQL lives here as readable text; the JSON files are generated and committed (Grafana provisions
them as they are). `tests/dashboards/` checks the files are current and runs every query.

SQL rules, so one query runs on plain PostgreSQL and on TimescaleDB:
  * time buckets only through `$__timeGroupAlias(col, $__interval)`: Grafana expands it to
    `floor(extract(epoch from col)/N)*N` on PostgreSQL and to `time_bucket('Ns', col)` when the
    datasource has `timescaledb: true` (docker-compose sets it);
  * variables always as `${var:sqlstring}` (quoted and escaped by Grafana, single or multi value);
  * a long time series is exactly (time, metric, value) ordered by time, so Grafana names each
    series by `metric` (overrides and colours match those names).

Usage: python tools/build_dashboards.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "dashboards" / "json"
DS = {"type": "grafana-postgresql-datasource", "uid": "fabricscope"}
SCHEMA_VERSION = 39
LAYER_COLORS = {"compute": "purple", "host": "orange", "nic": "yellow", "link": "red", "fabric": "blue",
                "storage": "green", "unknown": "gray"}
JOB = "${job:sqlstring}"
# The training hook's in-flight notices (#45, collectors/training/lastwords.py): one or two per rank
# and run, shown by the "Hang: suspects" panel, never as annotations (they would crowd out the rest).
HOOK_NOTICES = "('hang_watch', 'rank_exit', 'collective_entered', 'checkpoint_in_progress')"
DEVICES = "${device:sqlstring}"
IFACES = "${interface:sqlstring}"
NET_METRICS = "('rx_bytes_total', 'tx_bytes_total')"


# -- small constructors -----------------------------------------------------------------------

def target(sql: str, fmt: str = "time_series", ref: str = "A") -> dict[str, Any]:
    return {"datasource": DS, "editorMode": "code", "format": fmt, "rawQuery": True,
            "rawSql": sql.strip(), "refId": ref}


class Layout:
    """Left-to-right, top-to-bottom grid placement (Grafana is 24 columns wide)."""

    def __init__(self) -> None:
        self.x = self.y = self.row_h = 0
        self.next_id = 1

    def place(self, w: int, h: int) -> dict[str, int]:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1


def row(lay: Layout, title: str) -> dict[str, Any]:
    lay.x, lay.y, lay.row_h = 0, lay.y + lay.row_h, 0
    pos = lay.place(24, 1)
    lay.x, lay.y, lay.row_h = 0, lay.y + 1, 0
    return {"type": "row", "title": title, "id": lay.new_id(), "gridPos": pos, "collapsed": False, "panels": []}


def panel(lay: Layout, kind: str, title: str, targets: list[dict[str, Any]], *, w: int = 12, h: int = 8,
          unit: str | None = None, description: str = "", overrides: list[dict[str, Any]] | None = None,
          custom: dict[str, Any] | None = None, options: dict[str, Any] | None = None,
          defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    fd: dict[str, Any] = {**(defaults or {})}
    if unit:
        fd["unit"] = unit
    if custom:
        fd["custom"] = custom
    return {"type": kind, "title": title, "id": lay.new_id(), "gridPos": lay.place(w, h), "datasource": DS,
            "description": description, "targets": targets,
            "fieldConfig": {"defaults": fd, "overrides": overrides or []}, "options": options or {}}


def timeseries(lay: Layout, title: str, targets: list[dict[str, Any]], *, unit: str, w: int = 12, h: int = 8,
               description: str = "", overrides: list[dict[str, Any]] | None = None, stack: bool = False,
               bars: bool = False) -> dict[str, Any]:
    custom = {"drawStyle": "bars" if bars else "line", "lineWidth": 1, "fillOpacity": 60 if bars else 0,
              "showPoints": "never", "spanNulls": True, "stacking": {"mode": "normal" if stack else "none"}}
    return panel(lay, "timeseries", title, targets, w=w, h=h, unit=unit, description=description,
                 overrides=overrides, custom=custom,
                 options={"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                          "tooltip": {"mode": "multi", "sort": "desc"}})


def heatmap(lay: Layout, title: str, sql: str, *, unit: str, scheme: str = "Oranges", w: int = 12, h: int = 9,
            description: str = "") -> dict[str, Any]:
    """Rows are series (ports, ranks): a wide time series whose fields are the heatmap's buckets."""
    return panel(lay, "heatmap", title, [target(sql)], w=w, h=h, unit=unit, description=description,
                 options={"calculate": False, "cellGap": 1, "rowsFrame": {"layout": "auto"},
                          "yAxis": {"axisPlacement": "left", "unit": "none"},
                          "color": {"mode": "scheme", "scheme": scheme, "scale": "exponential",
                                    "exponent": 0.5, "steps": 64, "fill": "dark-orange", "reverse": False},
                          "legend": {"show": True}, "showValue": "never",
                          "tooltip": {"mode": "single", "yHistogram": False, "showColorScale": True},
                          "filterValues": {"le": 1e-9}})


def table(lay: Layout, title: str, sql: str, *, w: int = 12, h: int = 8, description: str = "",
          overrides: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return panel(lay, "table", title, [target(sql, "table")], w=w, h=h, description=description,
                 overrides=overrides, custom={"align": "auto", "cellOptions": {"type": "auto"}},
                 options={"showHeader": True, "cellHeight": "sm", "footer": {"show": False}})


def stat(lay: Layout, title: str, sql: str, *, unit: str, w: int = 6, h: int = 4,
         description: str = "") -> dict[str, Any]:
    return panel(lay, "stat", title, [target(sql, "table")], w=w, h=h, unit=unit, description=description,
                 options={"reduceOptions": {"values": False, "calcs": ["lastNotNull"], "fields": ""},
                          "colorMode": "value", "graphMode": "none", "textMode": "auto", "justifyMode": "auto"})


def bargauge(lay: Layout, title: str, sql: str, *, unit: str, w: int = 8, h: int = 8, description: str = "",
             overrides: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return panel(lay, "bargauge", title, [target(sql, "table")], w=w, h=h, unit=unit, description=description,
                 overrides=overrides, defaults={"min": 0},
                 options={"reduceOptions": {"values": True, "calcs": ["lastNotNull"], "fields": ""},
                          "orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
                          "valueMode": "color", "namePlacement": "auto", "sizing": "auto"})


def by_name(name: str, *props: tuple[str, Any]) -> dict[str, Any]:
    return {"matcher": {"id": "byName", "options": name}, "properties": [{"id": k, "value": v} for k, v in props]}


def color(c: str) -> tuple[str, Any]:
    return ("color", {"mode": "fixed", "fixedColor": c})


def layer_points() -> list[dict[str, Any]]:
    return [by_name(layer, color(c), ("custom.drawStyle", "points"), ("custom.pointSize", 10),
                    ("custom.showPoints", "always")) for layer, c in LAYER_COLORS.items()]


def layer_colors() -> list[dict[str, Any]]:
    return [by_name(layer, color(c)) for layer, c in LAYER_COLORS.items()]


def query_var(name: str, label: str, sql: str, *, multi: bool = False) -> dict[str, Any]:
    return {"type": "query", "name": name, "label": label, "datasource": DS,
            "definition": sql.strip(), "query": sql.strip(), "refresh": 2, "sort": 1,
            "multi": multi, "includeAll": multi, "current": {}, "options": [], "hide": 0}


def textbox(name: str, label: str, default: str, description: str) -> dict[str, Any]:
    return {"type": "textbox", "name": name, "label": label, "query": default, "description": description,
            "current": {"text": default, "value": default}, "options": [], "hide": 0}


def annotation(name: str, sql: str, icon: str) -> dict[str, Any]:
    return {"name": name, "datasource": DS, "enable": True, "iconColor": icon,
            "target": target(sql, "table", "Anno")}


BUILTIN_ANNOTATION = {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
                      "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
                      "type": "dashboard"}


def dashboard(uid: str, title: str, description: str, panels: list[dict[str, Any]], variables: list[dict[str, Any]],
              annotations: list[dict[str, Any]], time_from: str = "now-6h") -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["fabricscope"],
        "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True, "graphTooltip": 1,
        "timezone": "browser", "refresh": "30s", "liveNow": False, "fiscalYearStartMonth": 0,
        "time": {"from": time_from, "to": "now"}, "timepicker": {},
        "links": [{"type": "dashboards", "tags": ["fabricscope"], "asDropdown": False, "includeVars": False,
                   "keepTime": True, "title": "fabricscope", "icon": "external link", "targetBlank": False}],
        "templating": {"list": variables},
        "annotations": {"list": [BUILTIN_ANNOTATION, *annotations]},
        "panels": panels,
    }


# -- shared SQL fragments ---------------------------------------------------------------------

JOB_VAR = query_var("job", "Job", "SELECT name FROM jobs ORDER BY updated_at DESC, name")
DEVICE_VAR = query_var("device", "Device", f"""
SELECT DISTINCT src.device FROM sources src JOIN series se ON se.source_id = src.id
JOIN metrics m ON m.id = se.metric_id WHERE m.name IN {NET_METRICS} ORDER BY 1""", multi=True)
INTERFACE_VAR = query_var("interface", "Interface", f"""
SELECT DISTINCT src.interface FROM sources src JOIN series se ON se.source_id = src.id
JOIN metrics m ON m.id = se.metric_id
WHERE m.name IN {NET_METRICS} AND src.interface IS NOT NULL AND src.device IN ({DEVICES}) ORDER BY 1""", multi=True)

ALERTS_ANNOTATION_SQL = """
SELECT started_at AS "time", coalesce(resolved_at, now()) AS timeend,
       format('%s %s: step time %s s vs baseline %s s (since step %s)', kind, state, round(current_s::numeric, 3),
              round(baseline_s::numeric, 3), since_step) AS text,
       concat_ws(',', 'alert', kind, state, summary->>'layer') AS tags
FROM alerts WHERE job = ${job:sqlstring} AND started_at <= $__timeTo()
  AND coalesce(resolved_at, now()) >= $__timeFrom()
ORDER BY 1"""

# A slow step's causes (several when work and communication both lost time), or its top layer.
CAUSES_FROM = """attributions a,
     jsonb_array_elements(CASE WHEN jsonb_array_length(a.causes) > 0 THEN a.causes ELSE
       jsonb_build_array(jsonb_build_object('layer', a.layer, 'component', a.component, 'lost_s', a.lost_s)) END) c"""

# One column per layer (fixed order, so colours and bars stay put; 0 for an unaffected layer).
LOST_PER_LAYER = ",\n       ".join(
    f"coalesce(sum((c->>'lost_s')::float8) FILTER (WHERE c->>'layer' = '{layer}'), 0) AS {layer}"
    for layer in LAYER_COLORS)


# Per sample time: a source's rate summed over the chosen metrics/labels (priorities, rx+tx).
def port_rate_cte(metrics: str, extra: str = "") -> str:
    return f"""WITH r AS (
  SELECT s.ts, src.name AS source, sum(s.rate) AS rate
  FROM samples s JOIN series se ON se.id = s.series_id JOIN sources src ON src.id = se.source_id
  JOIN metrics m ON m.id = se.metric_id
  WHERE m.name IN {metrics} AND src.device IN ({DEVICES}) {extra} AND $__timeFilter(s.ts)
  GROUP BY s.ts, src.name)"""


UTIL_CTE = f"""WITH r AS (
  SELECT s.ts, src.name AS source, src.device, src.interface, m.name AS metric, s.rate
  FROM samples s JOIN series se ON se.id = s.series_id JOIN sources src ON src.id = se.source_id
  JOIN metrics m ON m.id = se.metric_id
  WHERE m.name IN {NET_METRICS} AND src.device IN ({DEVICES}) AND $__timeFilter(s.ts)),
speed AS (
  SELECT src.name AS source, coalesce(max(i.speed_bps), max(l.speed_bps)) AS bps
  FROM sources src LEFT JOIN interfaces i ON i.device = src.device AND i.name = src.interface
  LEFT JOIN links l ON l.a = src.name OR l.b = src.name
  WHERE src.device IN ({DEVICES}) GROUP BY src.name)"""


# -- Job overview -----------------------------------------------------------------------------

def job_overview() -> dict[str, Any]:
    lay = Layout()
    api = "${api}"
    step_link = {"title": "Attribution (API JSON)", "url": api + "/v1/jobs/${job}/steps/${__value.raw}/attribution",
                 "targetBlank": True}
    comp_link = {"title": "Drill down in Fabric",
                 "url": "/d/fabricscope-fabric/fabricscope-fabric?var-device=${__data.fields.device}"
                        "&var-interface=${__data.fields.interface}&${__url_time_range}"}
    panels = [
        stat(lay, "Steps", f"""
SELECT count(DISTINCT step) AS steps FROM steps WHERE job = {JOB} AND $__timeFilter(start_ts)""", unit="none"),
        stat(lay, "Slow steps found", f"""
SELECT count(*) AS slow_steps FROM attributions WHERE job = {JOB} AND slow AND $__timeFilter(step_start)""",
             unit="none"),
        stat(lay, "Time lost to slow steps", f"""
SELECT coalesce(sum(lost_s), 0) AS lost_s FROM attributions WHERE job = {JOB} AND slow AND $__timeFilter(step_start)""",
             unit="s"),
        stat(lay, "Median step time", f"""
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_s) AS median_step_s
FROM steps WHERE job = {JOB} AND $__timeFilter(start_ts)""", unit="s"),
        timeseries(lay, "Step time, baseline band and slow steps by attributed layer", [
            target(f"""
SELECT min(start_ts) AS "time", percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_s) AS "step time"
FROM steps WHERE job = {JOB} AND $__timeFilter(start_ts)
GROUP BY step ORDER BY 1""", ref="A"),
            target(f"""
SELECT step_start AS "time", baseline_s AS "baseline", baseline_s * 1.04 AS "slow above (min +4%)"
FROM attributions WHERE job = {JOB} AND baseline_s IS NOT NULL AND $__timeFilter(step_start)
ORDER BY 1""", ref="B"),
            target(f"""
SELECT step_start AS "time", layer AS metric, duration_s AS value
FROM attributions WHERE job = {JOB} AND slow AND $__timeFilter(step_start)
ORDER BY 1""", ref="C"),
        ], unit="s", w=24, h=10,
            description="Median step time over ranks; the band is the engine's robust baseline up to the "
                        "smallest slow margin; each slow step is a dot coloured by the layer it was attributed to.",
            overrides=[by_name("step time", color("text")),
                       by_name("baseline", color("green"), ("custom.lineStyle", {"fill": "dash", "dash": [6, 4]})),
                       by_name("slow above (min +4%)", color("green"), ("custom.fillBelowTo", "baseline"),
                               ("custom.fillOpacity", 20), ("custom.lineWidth", 0)),
                       *layer_points()]),
        bargauge(lay, "Time lost per layer", f"""
SELECT {LOST_PER_LAYER}
FROM {CAUSES_FROM}
WHERE a.job = {JOB} AND a.slow AND $__timeFilter(a.step_start)""", unit="s", overrides=layer_colors(),
                 description="Seconds lost to slow steps, split by the layer each cause was attributed to."),
        timeseries(lay, "Time lost per layer over time", [target(f"""
SELECT $__timeGroupAlias(a.step_start, $__interval), c->>'layer' AS metric, sum((c->>'lost_s')::float8) AS value
FROM {CAUSES_FROM}
WHERE a.job = {JOB} AND a.slow AND $__timeFilter(a.step_start)
GROUP BY 1, 2 ORDER BY 1""")], unit="s", w=16, stack=True, bars=True, overrides=layer_colors()),
        table(lay, "Top components by time lost", f"""
SELECT c->>'component' AS component, c->>'layer' AS layer, sum((c->>'lost_s')::float8) AS lost_s,
       count(DISTINCT a.step) AS steps,
       split_part(c->>'component', ':', 1) AS device, nullif(split_part(c->>'component', ':', 2), '') AS interface
FROM {CAUSES_FROM}
WHERE a.job = {JOB} AND a.slow AND $__timeFilter(a.step_start) AND c->>'component' IS NOT NULL
GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 15""", w=24, h=8,
              overrides=[by_name("component", ("links", [comp_link])), by_name("lost_s", ("unit", "s")),
                         by_name("device", ("custom.hidden", True)), by_name("interface", ("custom.hidden", True))]),
        table(lay, "Slow steps", f"""
SELECT step, step_start AS "start", duration_s, baseline_s, lost_s, layer, component, confidence,
       split_part(component, ':', 1) AS device, nullif(split_part(component, ':', 2), '') AS interface
FROM attributions WHERE job = {JOB} AND slow AND $__timeFilter(step_start)
ORDER BY step DESC LIMIT 500""", w=24, h=10,
              description="Click a step for the engine's attribution with its evidence (API), a component to "
                          "drill down into its counters.",
              overrides=[by_name("step", ("links", [step_link])), by_name("component", ("links", [comp_link])),
                         by_name("duration_s", ("unit", "s")), by_name("baseline_s", ("unit", "s")),
                         by_name("lost_s", ("unit", "s")), by_name("confidence", ("unit", "percentunit")),
                         by_name("device", ("custom.hidden", True)), by_name("interface", ("custom.hidden", True))]),
        *_placement_panels(lay),  # #17: GPU-to-NIC locality flags (tools/dashboard_placement.py)
        *_hang_panels(lay),  # #45: job_hang suspects (tools/dashboard_hang.py)
    ]
    variables = [JOB_VAR, textbox("api", "API URL", "http://localhost:8000",
                                  "fabricscope API base URL as the browser reaches it (attribution links)")]
    annotations = [
        annotation("Job events", f"""
SELECT start_ts AS "time", end_ts AS timeend, kind || ' ' || source AS text, concat_ws(',', 'event', kind) AS tags
FROM events WHERE (job = {JOB} OR job IS NULL) AND kind <> 'checkpoint' AND kind NOT IN {HOOK_NOTICES}
  AND start_ts <= $__timeTo() AND coalesce(end_ts, start_ts) >= $__timeFrom()
ORDER BY 1 LIMIT 500""", "orange"),
        annotation("Alerts", ALERTS_ANNOTATION_SQL, "red"),
    ]
    return dashboard("fabricscope-job", "fabricscope / Job overview",
                     "Step time against its baseline, which layer and component slowed each slow step.",
                     panels, variables, annotations)


# -- Collectives ------------------------------------------------------------------------------

BUSBW_FACTOR = """CASE op WHEN 'all_reduce' THEN 2.0 * (n - 1) / n
                    WHEN 'all_gather' THEN (n - 1)::float8 / n WHEN 'reduce_scatter' THEN (n - 1)::float8 / n
                    WHEN 'all_to_all' THEN (n - 1)::float8 / n ELSE 1.0 END"""

# One row per collective call of the job: its transfer time is the fastest rank's (the others
# also wait for late arrivals), as in nccl-tests' bus bandwidth.
COLL_CTE = f"""WITH c AS (
  SELECT step, seq, op, bytes, coalesce(max(group_size), count(DISTINCT rank)) AS n, min(start_ts) AS t0,
         min(duration_s) AS transfer_s, percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_s) AS median_s
  FROM collectives
  WHERE job = {JOB} AND op IN (${{op:sqlstring}}) AND $__timeFilter(start_ts)
  GROUP BY step, seq, op, bytes)"""


def collectives() -> dict[str, Any]:
    lay = Layout()
    size = "op || ' ' || pg_size_pretty(bytes)"
    panels = [
        timeseries(lay, "Bus bandwidth by op and size", [target(f"""
{COLL_CTE}
SELECT $__timeGroupAlias(t0, $__interval), {size} AS metric,
       avg(bytes / nullif(transfer_s, 0) * {BUSBW_FACTOR}) AS value
FROM c WHERE bytes > 0 AND n > 1
GROUP BY 1, 2 ORDER BY 1""")], unit="Bps",
                   description="bytes / transfer time × the op's bus factor (all_reduce 2(n-1)/n); transfer time "
                               "is the fastest rank's duration, so late arrivals do not count as slow network."),
        timeseries(lay, "Collective duration by op and size (median over ranks)", [target(f"""
{COLL_CTE}
SELECT $__timeGroupAlias(t0, $__interval), {size} AS metric, avg(median_s) AS value
FROM c GROUP BY 1, 2 ORDER BY 1""")], unit="s"),
        heatmap(lay, "Per-rank compute time over the step's median rank (stragglers stand out)", f"""
WITH cs AS (
  SELECT rank, step, sum(duration_s) AS coll_s FROM collectives
  WHERE job = {JOB} AND $__timeFilter(start_ts) GROUP BY rank, step),
per AS (
  SELECT s.rank, s.step, s.start_ts, s.duration_s - coalesce(cs.coll_s, 0) AS compute_s
  FROM steps s LEFT JOIN cs ON cs.rank = s.rank AND cs.step = s.step
  WHERE s.job = {JOB} AND $__timeFilter(s.start_ts)),
med AS (SELECT step, percentile_cont(0.5) WITHIN GROUP (ORDER BY compute_s) AS m FROM per GROUP BY step)
SELECT $__timeGroupAlias(per.start_ts, $__interval), 'rank ' || lpad(per.rank::text, 4, '0') AS metric,
       avg(greatest(per.compute_s - med.m, 0)) AS value
FROM per JOIN med USING (step)
GROUP BY 1, 2 ORDER BY 1, 2""", unit="s", scheme="Reds", w=24, h=10,
                description="Step time minus time inside collectives, per rank, above the step's median rank: "
                            "a slow GPU or host is one hot row; a slow network shows in the next panel on every "
                            "row."),
        heatmap(lay, "Per-rank time in collectives", f"""
SELECT $__timeGroupAlias(start_ts, $__interval), 'rank ' || lpad(rank::text, 4, '0') AS metric,
       sum(duration_s) / count(DISTINCT step) AS value
FROM collectives WHERE job = {JOB} AND op IN (${{op:sqlstring}}) AND $__timeFilter(start_ts)
GROUP BY 1, 2 ORDER BY 1, 2""", unit="s", scheme="Blues", w=24, h=10,
                description="Seconds per step each rank spends in collectives (transfer + waiting for others)."),
        table(lay, "Collectives by op and size", f"""
{COLL_CTE}
SELECT op, bytes, pg_size_pretty(bytes) AS size, count(*) AS calls,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY median_s) AS p50_s,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY median_s) AS p99_s,
       avg(bytes / nullif(transfer_s, 0) * {BUSBW_FACTOR}) FILTER (WHERE bytes > 0 AND n > 1) AS busbw
FROM c GROUP BY op, bytes ORDER BY op, bytes""", w=24, h=7,
              overrides=[by_name("bytes", ("custom.hidden", True)), by_name("p50_s", ("unit", "s")),
                         by_name("p99_s", ("unit", "s")), by_name("busbw", ("unit", "Bps"))]),
    ]
    variables = [JOB_VAR, query_var("op", "Op", f"SELECT DISTINCT op FROM collectives WHERE job = {JOB} ORDER BY 1",
                                    multi=True)]
    return dashboard("fabricscope-collectives", "fabricscope / Collectives",
                     "NCCL-style collective timings of a job: bus bandwidth, durations, per-rank heatmaps.",
                     panels, variables, [annotation("Alerts", ALERTS_ANNOTATION_SQL, "red")])


# -- Fabric -----------------------------------------------------------------------------------

def fabric() -> dict[str, Any]:
    lay = Layout()
    drill = f"AND src.interface IN ({IFACES})"
    pfc = "('rx_pause_frames_total', 'tx_pause_frames_total')"
    ecn = "('ecn_marked_packets_total', 'cnp_sent_total', 'cnp_handled_total')"
    errs = ("('rx_discards_total', 'tx_discards_total', 'rx_out_of_buffer_total', 'rx_errors_total', "
            "'tx_errors_total', 'rx_fcs_errors_total', 'symbol_errors_total', 'rdma_retransmits_total', "
            "'rdma_timeouts_total', 'link_down_total')")

    def hm(metrics: str) -> str:
        return f"""{port_rate_cte(metrics)}
SELECT $__timeGroupAlias(ts, $__interval), source AS metric, avg(rate) AS value
FROM r GROUP BY 1, 2 ORDER BY 1, 2"""

    def drill_ts(metrics: str, name: str) -> str:
        return f"""
SELECT $__timeGroupAlias(s.ts, $__interval), {name} AS metric, avg(s.rate) AS value
FROM samples s JOIN series se ON se.id = s.series_id JOIN sources src ON src.id = se.source_id
JOIN metrics m ON m.id = se.metric_id
WHERE m.name IN {metrics} AND src.device IN ({DEVICES}) {drill} AND $__timeFilter(s.ts)
GROUP BY 1, 2 ORDER BY 1"""

    panels = [
        row(lay, "Across the fabric (every port and NIC of the selected devices)"),
        heatmap(lay, "PFC pause frames/s (rx+tx, all priorities)", hm(pfc), unit="short", scheme="Reds"),
        heatmap(lay, "ECN-marked packets/s and CNPs/s", hm(ecn), unit="short", scheme="Purples"),
        heatmap(lay, "Utilization vs line rate (max of rx, tx)", f"""{UTIL_CTE},
u AS (SELECT r.ts, r.source, max(r.rate * 8 / nullif(speed.bps, 0)) AS util
      FROM r JOIN speed USING (source) GROUP BY r.ts, r.source)
SELECT $__timeGroupAlias(ts, $__interval), source AS metric, avg(util) AS value
FROM u GROUP BY 1, 2 ORDER BY 1, 2""", unit="percentunit", scheme="Greens"),
        heatmap(lay, "Discards and errors/s", hm(errs), unit="short", scheme="YlOrRd"),
        table(lay, "Worst ports in the range", f"""{UTIL_CTE},
c AS (
  SELECT src.name AS source, m.name AS metric, max(s.rate) AS peak
  FROM samples s JOIN series se ON se.id = s.series_id JOIN sources src ON src.id = se.source_id
  JOIN metrics m ON m.id = se.metric_id
  WHERE src.device IN ({DEVICES}) AND $__timeFilter(s.ts) GROUP BY 1, 2),
u AS (SELECT r.source, max(r.rate * 8 / nullif(speed.bps, 0)) AS util FROM r JOIN speed USING (source)
      GROUP BY r.source)
SELECT c.source, split_part(c.source, ':', 1) AS device, nullif(split_part(c.source, ':', 2), '') AS interface,
       (SELECT string_agg(CASE WHEN l.a = c.source THEN l.b ELSE l.a END, ', ') FROM links l
         WHERE l.a = c.source OR l.b = c.source) AS peer,
       sum(peak) FILTER (WHERE metric IN {pfc}) AS pause_per_s,
       sum(peak) FILTER (WHERE metric IN {ecn}) AS ecn_cnp_per_s,
       sum(peak) FILTER (WHERE metric IN {errs}) AS discards_errors_per_s,
       max(u.util) AS peak_util
FROM c LEFT JOIN u USING (source)
GROUP BY c.source HAVING sum(peak) FILTER (WHERE metric IN {pfc}) IS NOT NULL
ORDER BY pause_per_s DESC NULLS LAST, ecn_cnp_per_s DESC NULLS LAST LIMIT 25""", w=24, h=9,
              description="Peak rates per port over the time range (click a port to drill down).",
              overrides=[by_name("source", ("links", [{
                  "title": "Drill down", "url": "/d/fabricscope-fabric/fabricscope-fabric?var-device="
                  "${__data.fields.device}&var-interface=${__data.fields.interface}&${__url_time_range}"}])),
                  by_name("peak_util", ("unit", "percentunit")), by_name("device", ("custom.hidden", True)),
                  by_name("interface", ("custom.hidden", True))]),
        row(lay, "Drill-down: $device / $interface"),
        timeseries(lay, "PFC pause frames/s by priority", [target(drill_ts(
            pfc, "src.name || ' ' || left(m.name, 2) || ' prio ' || coalesce(se.labels->>'priority', '-')"))],
                   unit="short"),
        timeseries(lay, "ECN marks and CNPs/s", [target(drill_ts(
            ecn, "src.name || ' ' || replace(m.name, '_total', '')"))], unit="short"),
        timeseries(lay, "Discards and errors/s", [target(drill_ts(
            errs, "src.name || ' ' || replace(m.name, '_total', '')"))], unit="short"),
        timeseries(lay, "Utilization vs line rate", [target(f"""{UTIL_CTE}
SELECT $__timeGroupAlias(r.ts, $__interval), r.source || ' ' || left(r.metric, 2) AS metric,
       avg(r.rate * 8 / nullif(speed.bps, 0)) AS value
FROM r JOIN speed USING (source) WHERE r.interface IN ({IFACES})
GROUP BY 1, 2 ORDER BY 1""")], unit="percentunit",
                   overrides=[]),
    ]
    variables = [DEVICE_VAR, INTERFACE_VAR]
    annotations = [annotation("Fabric events", f"""
SELECT start_ts AS "time", end_ts AS timeend, kind || ' ' || source AS text, concat_ws(',', 'event', kind) AS tags
FROM events WHERE kind <> 'checkpoint' AND kind NOT IN {HOOK_NOTICES} AND split_part(source, ':', 1) IN ({DEVICES})
  AND start_ts <= $__timeTo() AND coalesce(end_ts, start_ts) >= $__timeFrom()
ORDER BY 1 LIMIT 500""", "orange")]
    return dashboard("fabricscope-fabric", "fabricscope / Fabric",
                     "Switch ports and NICs: PFC pause, ECN/CNP, discards and errors, utilization vs line rate.",
                     panels, variables, annotations)


# -- Storage ----------------------------------------------------------------------------------

STORAGE_METRICS = ("('read_latency_seconds', 'write_latency_seconds', 'read_bytes_total', 'write_bytes_total', "
                   "'read_ops_total', 'write_ops_total')")


def storage() -> dict[str, Any]:
    lay = Layout()
    vol = "${volume:sqlstring}"

    def vol_ts(metrics: str, col: str) -> str:
        return f"""
SELECT $__timeGroupAlias(s.ts, $__interval), src.name || ' ' || split_part(m.name, '_', 1) AS metric,
       avg(s.{col}) AS value
FROM samples s JOIN series se ON se.id = s.series_id JOIN sources src ON src.id = se.source_id
JOIN metrics m ON m.id = se.metric_id
WHERE m.name IN {metrics} AND src.name IN ({vol}) AND $__timeFilter(s.ts)
GROUP BY 1, 2 ORDER BY 1"""

    panels = [
        timeseries(lay, "Latency per volume", [target(vol_ts("('read_latency_seconds', 'write_latency_seconds')",
                                                              "value"))], unit="s", w=24),
        timeseries(lay, "Throughput per volume", [target(vol_ts("('read_bytes_total', 'write_bytes_total')",
                                                                 "rate"))], unit="Bps"),
        timeseries(lay, "Operations per volume", [target(vol_ts("('read_ops_total', 'write_ops_total')",
                                                                 "rate"))], unit="iops"),
        table(lay, "Checkpoints", f"""
SELECT start_ts AS "start", source, job, (attrs->>'step')::bigint AS step,
       extract(epoch FROM end_ts - start_ts) AS duration_s, (attrs->>'bytes')::float8 AS bytes,
       (attrs->>'bytes')::float8 / nullif(extract(epoch FROM end_ts - start_ts), 0) AS write_bytes_per_s
FROM events WHERE kind = 'checkpoint' AND source IN ({vol}) AND $__timeFilter(start_ts)
ORDER BY start_ts DESC LIMIT 200""", w=24,
              overrides=[by_name("duration_s", ("unit", "s")), by_name("bytes", ("unit", "bytes")),
                         by_name("write_bytes_per_s", ("unit", "Bps"))]),
    ]
    variables = [query_var("volume", "Volume", f"""
SELECT DISTINCT src.name FROM sources src JOIN series se ON se.source_id = src.id
JOIN metrics m ON m.id = se.metric_id WHERE m.name IN {STORAGE_METRICS} ORDER BY 1""", multi=True)]
    annotations = [annotation("Checkpoints", f"""
SELECT start_ts AS "time", end_ts AS timeend,
       format('checkpoint %s step %s (%s)', source, attrs->>'step', coalesce(job, '-')) AS text,
       'checkpoint' AS tags
FROM events WHERE kind = 'checkpoint' AND source IN ({vol})
  AND start_ts <= $__timeTo() AND coalesce(end_ts, start_ts) >= $__timeFrom()
ORDER BY 1 LIMIT 1000""", "blue")]
    return dashboard("fabricscope-storage", "fabricscope / Storage",
                     "Per-volume latency, throughput and operations, with checkpoints as annotations.",
                     panels, variables, annotations)


def _placement_panels(lay: Layout) -> list[dict[str, Any]]:
    """#17: in tools/dashboard_placement.py (imported here, as it imports the constructors above)."""
    sys.path.insert(0, str(OUT.parent.parent))
    from tools.dashboard_placement import placement_panels

    return placement_panels(lay)


def _hang_panels(lay: Layout) -> list[dict[str, Any]]:
    """#45: in tools/dashboard_hang.py (imported here, as it imports the constructors above)."""
    sys.path.insert(0, str(OUT.parent.parent))
    from tools.dashboard_hang import hang_panels

    return hang_panels(lay)


def capacity() -> dict[str, Any]:
    """Its panels live in tools/dashboard_capacity.py (imported here, as it imports the constructors above)."""
    sys.path.insert(0, str(OUT.parent.parent))  # `python tools/build_dashboards.py` has only tools/ on the path
    from tools.dashboard_capacity import capacity as build

    return build()


def fleet() -> dict[str, Any]:
    """#48: its panels live in tools/dashboard_fleet.py."""
    sys.path.insert(0, str(OUT.parent.parent))
    from tools.dashboard_fleet import fleet as build

    return build()


DASHBOARDS = {"job-overview.json": job_overview, "collectives.json": collectives, "fabric.json": fabric,
              "storage.json": storage, "capacity.json": capacity, "fleet.json": fleet}


def render_all() -> dict[str, str]:
    return {name: json.dumps(fn(), indent=2, ensure_ascii=False) + "\n" for name, fn in DASHBOARDS.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if a committed JSON file is out of date")
    args = ap.parse_args()
    stale = []
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        path = OUT / name
        if path.exists() and path.read_text() == text:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run python tools/build_dashboards.py)", file=sys.stderr)
        return 1
    print(f"{'wrote' if stale and not args.check else 'up to date:'} {', '.join(stale) or len(DASHBOARDS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
