"""The Grafana dashboards: structure, provisioning, and every query run against simulated data.

No Grafana server can run here, so this is the proof that the panels work: each query is expanded
as Grafana expands it (tools/grafana_sql.py) and run on a real database that the cluster simulator
filled through the HTTP API; the rows must have the shape the panel type needs.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
import yaml

from tests.dashboards.conftest import JOB, DashEnv
from tools import build_dashboards
from tools.grafana_sql import Context, MacroError, Query, all_panels, expand, load_dashboards, queries, variable_refs

DASHBOARDS = load_dashboards()
ALL_QUERIES = [q for name, d in DASHBOARDS.items() for q in queries(name, d)]
PROVISIONING = build_dashboards.OUT.parent / "provisioning"
# Panel types of Grafana core (no plugin to install).
KNOWN_PANELS = {"timeseries", "heatmap", "table", "stat", "bargauge", "barchart", "piechart", "row", "text",
                "state-timeline", "status-history", "gauge"}
LAYERS = {"compute", "host", "nic", "link", "fabric", "storage", "unknown"}
NUMERIC = (int, float, Decimal)
BUILTIN_LINK_VARS = {"__value", "__data", "__url_time_range", "__from", "__to", "__field", "__series"}


def _datasource() -> dict[str, Any]:
    doc = yaml.safe_load((PROVISIONING / "datasources" / "fabricscope.yaml").read_text())
    (ds,) = doc["datasources"]
    return ds


# -- structure --------------------------------------------------------------------------------

def test_committed_json_is_what_the_builder_writes() -> None:
    built = build_dashboards.render_all()
    assert sorted(built) == sorted(DASHBOARDS), "dashboards/json has files the builder does not write"
    for name, text in built.items():
        assert (build_dashboards.OUT / name).read_text() == text, f"{name} is stale: run tools/build_dashboards.py"


def test_every_dashboard_required_is_there() -> None:
    titles = {d["title"] for d in DASHBOARDS.values()}
    for want in ("Job overview", "Collectives", "Fabric", "Storage", "Capacity"):
        assert any(want in t for t in titles), f"no {want} dashboard"
    uids = [d["uid"] for d in DASHBOARDS.values()]
    assert len(set(uids)) == len(uids)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_structure(name: str) -> None:
    dash = DASHBOARDS[name]
    ds = _datasource()
    assert dash["schemaVersion"] >= 39 and dash["uid"] and len(dash["uid"]) <= 40
    defined = [v["name"] for v in dash["templating"]["list"]]
    assert len(set(defined)) == len(defined)
    ids = [p["id"] for p in all_panels(dash)]
    assert len(set(ids)) == len(ids), "panel ids must be unique"
    for p in all_panels(dash):
        where = f"{name}: panel {p.get('title')!r}"
        assert p["type"] in KNOWN_PANELS, f"{where}: unknown panel type {p['type']}"
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, f"{where}: off the grid"
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": ds["type"], "uid": ds["uid"]}, f"{where}: not the provisioned datasource"
        assert p["targets"], f"{where}: no query"
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["rawQuery"] and t["rawSql"].strip()
            assert t["format"] in ("time_series", "table")
        if p["type"] in ("heatmap", "timeseries"):
            assert all(t["format"] == "time_series" for t in p["targets"]), f"{where}: needs time series"
    # Every variable a query, link or title refers to exists, and is defined before variables using it.
    for i, v in enumerate(dash["templating"]["list"]):
        if v["type"] == "query":
            assert v["datasource"] == {"type": ds["type"], "uid": ds["uid"]}
            refs = variable_refs(v["query"])
            assert refs <= set(defined[:i]), f"{name}: variable {v['name']} uses {refs - set(defined[:i])}"
    texts = [q.sql for q in queries(name, dash)]
    texts += [p.get("title", "") for p in all_panels(dash)]
    texts += [link["url"] for p in all_panels(dash) for o in p.get("fieldConfig", {}).get("overrides", [])
              for prop in o["properties"] if prop["id"] == "links" for link in prop["value"]]
    for text in texts:
        missing = variable_refs(text) - set(defined)
        assert not missing, f"{name}: undefined variables {missing} in {text[:80]!r}"
    for a in dash["annotations"]["list"]:
        if "target" in a:
            assert a["datasource"] == {"type": ds["type"], "uid": ds["uid"]}


def test_sql_uses_portable_forms_only() -> None:
    """One query for PostgreSQL and TimescaleDB: time buckets only through Grafana's macro."""
    for q in ALL_QUERIES:
        low = q.sql.lower()
        assert "time_bucket(" not in low and "date_bin(" not in low, f"{q.where}: use $__timeGroupAlias"
        assert not re.search(r"(?<![{\w])\$(job|device|interface|volume|op)\b", q.sql), \
            f"{q.where}: write variables as ${{var:sqlstring}} (quoted and escaped)"


def test_provisioning_points_at_the_dashboards() -> None:
    ds = _datasource()
    assert ds["type"] == "grafana-postgresql-datasource" and ds["uid"] == "fabricscope"
    assert "password" not in ds and "password" in ds["secureJsonData"]
    prov = yaml.safe_load((PROVISIONING / "dashboards" / "fabricscope.yaml").read_text())
    (p,) = prov["providers"]
    compose = yaml.safe_load((build_dashboards.OUT.parent.parent / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert any(m.startswith("./dashboards/json:") and m.split(":")[1] == p["options"]["path"] for m in mounts)


def test_expander_follows_grafana() -> None:
    from datetime import UTC

    ctx = Context(datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 1, 1, 1, tzinfo=UTC),
                  {"job": ["o'brien"], "device": ["leaf1", "leaf2"]}, multi={"device"})
    sql = "x = ${job:sqlstring} AND d IN ($device) AND j = '$job' AND $__timeFilter(ts) GROUP BY 1"
    out = expand("SELECT $__timeGroupAlias(ts, $__interval), 1 WHERE " + sql, ctx)
    assert "x = 'o''brien'" in out and "d IN ('leaf1','leaf2')" in out and "j = 'o'brien'" in out
    assert "ts BETWEEN '2025-01-01T00:00:00Z' AND '2025-01-01T01:00:00Z'" in out
    assert 'floor(extract(epoch from ts)/10)*10 AS "time"' in out  # 3600 s / 600 points -> 6 s -> min 10 s
    ctx.timescaledb = True
    assert "time_bucket('10s',ts)" in expand("$__timeGroup(ts, '10s')", ctx)
    with pytest.raises(MacroError):
        expand("$__timeGroupFill(ts)", ctx)


# -- every query on the simulated cluster ----------------------------------------------------

def _run(env: DashEnv, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with psycopg.connect(env.url, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '30s'")
        cur = conn.execute(sql)
        return [d.name for d in cur.description or []], cur.fetchall()


def _is_time(v: Any) -> bool:
    return isinstance(v, datetime | int | float | Decimal)


def _check_shape(q: Query, cols: list[str], rows: list[tuple[Any, ...]]) -> None:
    assert rows, f"{q.where}: no rows on the simulated cluster"
    assert len(set(cols)) == len(cols), f"{q.where}: duplicate column names {cols}"
    if q.kind == "variable":
        assert len(cols) == 1 and all(r[0] is not None for r in rows), f"{q.where}: one non-null column"
        return
    if q.kind == "annotation":
        assert cols[0] == "time" and "text" in cols, f"{q.where}: annotations need time and text, got {cols}"
        for r in rows:
            d = dict(zip(cols, r, strict=True))
            assert d["time"] is not None and d["text"]
            assert d.get("timeend") is None or d["timeend"] >= d["time"]
        return
    if q.fmt == "time_series":
        assert cols[0] == "time", f"{q.where}: first column must be time, got {cols}"
        times = [r[0] for r in rows]
        assert all(_is_time(t) for t in times), f"{q.where}: time column of {type(times[0])}"
        assert times == sorted(times), f"{q.where}: Grafana needs rows ordered by time"
        if "metric" in cols:
            # Exactly (time, metric, value): Grafana then names each series by `metric`.
            assert cols == ["time", "metric", "value"], f"{q.where}: long form must be time, metric, value"
            assert all(isinstance(r[1], str) and r[1] for r in rows)
            assert any(isinstance(r[2], NUMERIC) for r in rows)
        else:
            for i in range(1, len(cols)):
                assert all(r[i] is None or isinstance(r[i], NUMERIC) for r in rows), f"{q.where}: {cols[i]}"
        return
    kind = q.panel["type"]
    if kind in ("stat", "bargauge"):  # one row; a bar gauge draws a bar per (numeric) column
        assert len(rows) == 1 and all(isinstance(v, NUMERIC) for v in rows[0]), f"{q.where}: {rows}"


def _check_links_and_overrides(q: Query, cols: list[str]) -> None:
    """Field overrides and `${__data.fields.x}` links must name columns the table query returns."""
    if q.kind != "panel" or q.fmt != "table":
        return
    for o in q.panel["fieldConfig"]["overrides"]:
        if o["matcher"]["id"] == "byName":
            assert o["matcher"]["options"] in cols, f"{q.where}: override for missing column {o['matcher']}"
        for prop in o["properties"]:
            if prop["id"] == "links":
                for link in prop["value"]:
                    for f in re.findall(r"__data\.fields\.(\w+)", link["url"]):
                        assert f in cols, f"{q.where}: link uses missing column {f}"
                    assert set(re.findall(r"\$\{(\w+)", link["url"])) <= BUILTIN_LINK_VARS | {"api", "job"}


@pytest.mark.slow
@pytest.mark.parametrize("q", ALL_QUERIES, ids=[f"{q.dashboard}:{q.where}" for q in ALL_QUERIES])
def test_query_runs_and_has_the_panel_shape(q: Query, dash_env: DashEnv, dash_ctx: Context) -> None:
    cols, rows = _run(dash_env, expand(q.sql, dash_ctx))
    _check_shape(q, cols, rows)
    _check_links_and_overrides(q, cols)


@pytest.mark.slow
def test_timescaledb_form_runs_where_the_extension_is(dash_env: DashEnv) -> None:
    if not dash_env.timescaledb:
        pytest.skip("the test database has no timescaledb extension (plain PostgreSQL); the plain form ran above")
    ctx = dash_env.context(timescaledb=True)
    for q in ALL_QUERIES:
        cols, rows = _run(dash_env, expand(q.sql, ctx))
        _check_shape(q, cols, rows)


# -- what the panels show is right ------------------------------------------------------------

def _panel_rows(env: DashEnv, ctx: Context, dashboard: str, title: str, ref: str = "A") -> list[dict[str, Any]]:
    (q,) = [q for q in ALL_QUERIES if q.dashboard == dashboard and q.where == f"panel '{title}' {ref}"]
    cols, rows = _run(env, expand(q.sql, ctx))
    return [dict(zip(cols, r, strict=True)) for r in rows]


@pytest.mark.slow
def test_slow_steps_table_agrees_with_the_api(dash_env: DashEnv, dash_ctx: Context) -> None:
    rows = _panel_rows(dash_env, dash_ctx, "job-overview.json", "Slow steps")
    api = httpx.get(f"{dash_env.api}/v1/jobs/{JOB}/steps", params={"slow": "true"}, timeout=60).json()
    assert {r["step"] for r in rows} == {s["step"] for s in api}
    assert {r["layer"] for r in rows} <= LAYERS
    assert all(0 <= r["confidence"] <= 1 for r in rows)
    truth_slow = {s for s, t in dash_env.scenario.truth.items() if t.slow}
    assert len({r["step"] for r in rows} & truth_slow) >= 0.6 * len(truth_slow)
    one = rows[0]
    att = httpx.get(f"{dash_env.api}/v1/jobs/{JOB}/steps/{one['step']}/attribution", timeout=60).json()
    assert (att["layer"], att["component"]) == (one["layer"], one["component"])  # the link's target agrees
    lost = _panel_rows(dash_env, dash_ctx, "job-overview.json", "Time lost per layer")
    assert set(lost[0]) == LAYERS
    report = httpx.get(f"{dash_env.api}/v1/jobs/{JOB}/report", timeout=60).json()  # the same split, by the API
    want = {x["layer"]: x["lost_s"] for x in report["layers"]}
    assert {k: round(v, 3) for k, v in lost[0].items() if v} == {k: round(v, 3) for k, v in want.items() if v}


@pytest.mark.slow
def test_bus_bandwidth_is_the_simulated_link_speed(dash_env: DashEnv, dash_ctx: Context) -> None:
    rows = _panel_rows(dash_env, dash_ctx, "collectives.json", "Bus bandwidth by op and size")
    bw = np.array([float(r["value"]) for r in rows])
    want = dash_env.scenario.spec.bus_bw_Bps
    assert 0.5 * want < float(np.median(bw)) < 1.1 * want, (np.median(bw), want)


@pytest.mark.slow
def test_straggler_is_the_hot_row_of_the_compute_heatmap(dash_env: DashEnv, dash_ctx: Context) -> None:
    sc = dash_env.scenario
    f = next(f for f in sc.faults if f.kind == "gpu_straggler")
    rows = _panel_rows(dash_env, dash_ctx, "collectives.json",
                       "Per-rank compute time over the step's median rank (stragglers stand out)")
    lo = sc.t0 + float(np.nanmin(sc.timeline.start[f.start_step]))
    hi = sc.t0 + float(np.nanmax(sc.timeline.end[f.start_step + f.steps - 1]))
    per_rank: dict[str, list[float]] = {}
    for r in rows:
        t = float(r["time"]) if not isinstance(r["time"], datetime) else r["time"].timestamp()
        if lo <= t <= hi:
            per_rank.setdefault(r["metric"], []).append(float(r["value"]))
    hot = max(per_rank, key=lambda k: np.mean(per_rank[k]))
    assert hot == f"rank {f.target:04d}", (hot, f)


@pytest.mark.slow
def test_worst_port_is_a_congested_one(dash_env: DashEnv, dash_ctx: Context) -> None:
    sc = dash_env.scenario
    pfc = {f.component for f in sc.faults if f.kind == "fabric_congestion" and f.variant.endswith("pfc")}
    rows = _panel_rows(dash_env, dash_ctx, "fabric.json", "Worst ports in the range")
    if pfc:  # the congested switch port, or the NIC it pauses (the pause frames cross the link)
        assert rows[0]["source"] in pfc or rows[0]["peer"] in pfc, (rows[0], pfc)
    util = [r["peak_util"] for r in rows if r["peak_util"] is not None]
    assert util and all(0 < u < 1.2 for u in util)
    assert all(r["peer"] for r in rows), "every simulated port has a declared link"


@pytest.mark.slow
def test_checkpoints_table_lists_every_checkpoint(dash_env: DashEnv, dash_ctx: Context) -> None:
    rows = _panel_rows(dash_env, dash_ctx, "storage.json", "Checkpoints")
    assert len(rows) == len(dash_env.scenario.events_payload())
    assert all(r["duration_s"] > 0 and r["write_bytes_per_s"] > 0 for r in rows)
