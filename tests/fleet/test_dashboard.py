"""The Fleet dashboard's panels say what the API says (#48), on a simulated fleet of its own (the
fleet simulation of test_fleet_sim, another noise draw and month) rolled by the service's job:
each query expanded as Grafana expands it (tools/grafana_sql.py) and run on the same database."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.fleet.conftest import rolled
from tests.fleet.fleetsim import CABLE, DAYS, GPU, Fleet, fleet_start, write_day
from tools.grafana_sql import Context, expand, load_dashboards, queries

FLEET = load_dashboards()["fleet.json"]
DOCS_IMG = Path(__file__).resolve().parent.parent.parent / "docs" / "img"


def _rows(db_url: str, ctx: Context, title: str) -> list[dict[str, Any]]:
    (q,) = [q for q in queries("fleet.json", FLEET) if q.kind == "panel" and q.panel["title"] == title]
    with psycopg.connect(db_url, autocommit=True) as conn:
        cur = conn.execute(expand(q.sql, ctx))
        cols = [d.name for d in cur.description or []]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def test_fleet_panels_agree_with_the_api(api: httpx.Client, fleet_db: str) -> None:
    fleet = Fleet(fleet_start(2), 2)
    for d in range(DAYS):
        write_day(api, fleet_db, fleet, d)
    rolled(fleet_db)
    # a range starting mid-day: both round it down to the day's UTC midnight
    lo, hi = fleet.day(3) + timedelta(hours=7), fleet.day(DAYS)
    ctx = Context(lo, hi, {"component": [CABLE]}, multi=set())
    params = {"from": lo.isoformat(), "to": hi.isoformat(), "limit": 20}

    want = api.get("/v1/fleet/components", params=params).json()["components"]
    got = _rows(fleet_db, ctx, "Top components by GPU-hours lost")
    assert [r["component"] for r in got] == [w["component"] for w in want]
    assert got[0]["component"] == CABLE and got[1]["component"] == GPU
    for g, w in zip(got, want, strict=True):
        assert (g["layer"], g["jobs"], g["slow_steps"]) == (w["layer"], w["jobs"], w["slow_steps"])
        assert g["gpu_hours"] == pytest.approx(w["gpu_hours"], abs=1e-6)
        assert g["first_seen"].isoformat().replace("+00:00", "Z")[:19] == w["first_seen"][:19]

    layers = {w["layer"]: w["gpu_hours"] for w in api.get("/v1/fleet/layers", params=params).json()["layers"]}
    per_day = _rows(fleet_db, ctx, "Lost GPU-hours per layer (per day)")
    assert {r["time"] for r in per_day} == {fleet.day(d) for d in range(3, DAYS)}
    summed: dict[str, float] = {}
    for r in per_day:
        summed[r["metric"]] = summed.get(r["metric"], 0.0) + float(r["value"])
    assert summed.keys() == layers.keys()
    for layer, v in layers.items():
        assert summed[layer] == pytest.approx(v, abs=1e-5)

    one = api.get(f"/v1/fleet/components/{CABLE}", params=params).json()
    timeline = _rows(fleet_db, ctx, "Incident timeline: the chosen component's GPU-hours lost per job and day")
    assert sum(float(r["value"]) for r in timeline) == pytest.approx(one["summary"]["gpu_hours"], abs=1e-5)
    jobs = _rows(fleet_db, ctx, "The chosen component's jobs")
    assert len(jobs) == one["summary"]["jobs"]
    assert {r["evidence"] for r in jobs} == {f"rx_fcs_errors_total on {CABLE}"}

    if os.environ.get("FABRICSCOPE_DOC_IMAGES") == "1":  # docs/img/fabricscope-fleet.png, from this fleet
        from tools.render_dashboards import render_all

        render_all(fleet_db, DOCS_IMG, job=fleet.job(9, 0), time_from=fleet.day(0), time_to=hi, api=str(api.base_url),
                   only=["fleet.json"])
