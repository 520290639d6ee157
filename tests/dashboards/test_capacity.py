"""The Capacity dashboard shows what the trends API says, on the database the simulator and the
earlier jobs filled through the API (conftest, capacity_data), over the last two days."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from fabricscope.service.settings import Settings
from tests.dashboards.capacity_data import MODEL
from tests.dashboards.conftest import JOB, DashEnv
from tools.dashboard_capacity import JUMP_MIN_POINTS, JUMP_THRESHOLD, JUMP_WINDOW
from tools.grafana_sql import Context, expand, load_dashboards, queries, resolve_variables

CAPACITY = load_dashboards()["capacity.json"]
DOCS_IMG = Path(__file__).resolve().parent.parent.parent / "docs" / "img"


def _days(env: DashEnv) -> Context:
    ctx = Context(env.time_to - timedelta(hours=44), env.time_to, {"job": [JOB], "api": [env.api]})
    with psycopg.connect(env.url, autocommit=True) as conn:
        return resolve_variables(conn, {"capacity.json": CAPACITY}, ctx)


def _rows(env: DashEnv, ctx: Context, where: str) -> list[dict[str, Any]]:
    (q,) = [q for q in queries("capacity.json", CAPACITY) if q.where == where]
    with psycopg.connect(env.url, autocommit=True) as conn:
        cur = conn.execute(expand(q.sql, ctx))
        cols = [d.name for d in cur.description or []]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _epoch(v: Any) -> float:
    return v.timestamp() if isinstance(v, datetime) else float(v)


@pytest.mark.slow
def test_comm_fraction_panel_is_the_trends_api(dash_env: DashEnv) -> None:
    ctx = _days(dash_env)
    ctx.min_interval_s = 3600  # one point per rollup hour, as Grafana shows two days
    rows = _rows(dash_env, ctx, "panel 'Comm fraction of step time by model' A")
    assert {r["metric"] for r in rows} == {MODEL, "mixtral-sim"}
    api = httpx.get(f"{dash_env.api}/v1/trends", params={
        "metric": "comm_fraction", "by": "model", "step": 3600, "from": ctx.time_from.isoformat(),
        "to": ctx.time_to.isoformat()}, timeout=60).json()
    want = {(s["group"], datetime.fromisoformat(p["ts"]).timestamp()): p["value"]
            for s in api["series"] for p in s["points"]}
    got = {(r["metric"], _epoch(r["time"])): float(r["value"]) for r in rows}
    assert got.keys() == want.keys() and len(got) >= 30
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-9), k
    # the heavier model spends more of its step in communication
    mean = {m: sum(v for (g, _), v in got.items() if g == m) / sum(1 for g, _ in got if g == m)
            for m in (MODEL, "mixtral-sim")}
    assert mean["mixtral-sim"] > mean[MODEL]


@pytest.mark.slow
def test_version_changes_are_annotated_where_the_api_finds_them(dash_env: DashEnv) -> None:
    ctx = _days(dash_env)
    rows = _rows(dash_env, ctx, "annotation 'Version changes'")
    api = httpx.get(f"{dash_env.api}/v1/trends/annotations", params={
        "by": "model", "from": ctx.time_from.isoformat(), "to": ctx.time_to.isoformat()}, timeout=60).json()
    changes = [a for a in api["annotations"] if a["kind"] == "version_change"]
    assert sorted(_epoch(r["time"]) for r in rows) == sorted(datetime.fromisoformat(a["ts"]).timestamp()
                                                             for a in changes)
    texts = " | ".join(r["text"] for r in rows)
    assert "nccl 2.20.5 → 2.21.5 (cap-llama-2)" in texts and f"torch 2.4.0 → 2.5.1 ({JOB})" in texts
    assert "mixtral-sim: nccl 2.20.5 → 2.21.5 (cap-mixtral-2)" in texts


@pytest.mark.slow
def test_comm_fraction_jumps_are_annotated_where_the_api_finds_them(dash_env: DashEnv) -> None:
    fields = Settings.model_fields
    defaults = tuple(fields[f"trends_jump_{k}"].default for k in ("threshold", "window", "min_points"))
    assert defaults == (JUMP_THRESHOLD, JUMP_WINDOW, JUMP_MIN_POINTS)
    ctx = _days(dash_env)
    rows = _rows(dash_env, ctx, "annotation 'Comm fraction jumps'")
    api = httpx.get(f"{dash_env.api}/v1/trends/annotations", params={
        "by": "model", "step": 3600, "from": ctx.time_from.isoformat(), "to": ctx.time_to.isoformat()},
        timeout=60).json()
    jumps = [a for a in api["annotations"] if a["kind"] == "comm_fraction_jump"]
    assert sorted(_epoch(r["time"]) for r in rows) == sorted(datetime.fromisoformat(a["ts"]).timestamp()
                                                             for a in jumps)
    # cap-llama-3's two slow hours are one excursion: annotated once, at its first hour;
    # cap-mixtral-3 jumps in the simulated job's hour
    with psycopg.connect(dash_env.url, autocommit=True) as conn:
        first = dict(conn.execute("SELECT job, min(hour) FROM step_rollup "
                                  "WHERE job IN ('cap-llama-3', 'cap-mixtral-3') GROUP BY job").fetchall())
    by_time = {_epoch(r["time"]): r["text"] for r in rows}
    assert len(rows) == 2 and by_time.keys() == {t.timestamp() for t in first.values()}
    llama, mixtral = by_time[first["cap-llama-3"].timestamp()], by_time[first["cap-mixtral-3"].timestamp()]
    assert llama.startswith(f"{MODEL}: comm fraction 0.2") and "vs trailing median 0.1" in llama
    assert mixtral.startswith("mixtral-sim: comm fraction 0.5") and "vs trailing median 0.3" in mixtral


@pytest.mark.slow
def test_busbw_fraction_of_the_simulated_fabric(dash_env: DashEnv, dash_ctx: Context) -> None:
    """The baseline is the simulated ring's own bandwidth: a healthy job gets most of it, never much more."""
    rows = _rows(dash_env, dash_ctx, "panel 'Bus bandwidth, fraction of the acceptance baseline' A")
    fr = [float(r["value"]) for r in rows]
    assert {r["metric"].split()[0] for r in rows} == {"all_reduce"}
    assert fr and all(0.3 < f < 1.1 for f in fr), fr
    days = _rows(dash_env, _days(dash_env), "panel 'Bus bandwidth, fraction of the acceptance baseline' A")
    earlier = [float(r["value"]) for r in days if r["metric"] == "all_reduce 1 GiB"]
    # the light 4-rank jobs were given a baseline they reach 90 % of; the heavy model's collectives are slower
    assert earlier and 0.85 < max(earlier) < 0.95 and 0.3 < min(earlier) < 0.8


@pytest.mark.slow
def test_capacity_is_drawn_over_two_days(dash_env: DashEnv, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from tools.render_dashboards import render_all

    kw: dict[str, Any] = {"job": JOB, "time_from": dash_env.time_to - timedelta(hours=44),
                          "time_to": dash_env.time_to, "api": dash_env.api, "only": ["capacity.json"]}
    (png,) = render_all(dash_env.url, tmp_path, **kw)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    if os.environ.get("FABRICSCOPE_DOC_IMAGES") == "1":
        render_all(dash_env.url, DOCS_IMG, **kw)
