"""POST/GET acceptance runs and the baseline through the real service and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from alembic import command

from fabricscope.service.db.database import _alembic_config
from tests.acceptance.conftest import ZTAN_ROWS, post_run, row, run_body, unique, ztan_body
from tests.support import TestDatabase


def test_post_list_get_a_recorded_run(api: httpx.Client) -> None:
    fabric = unique("prod-ib")
    r = api.post("/v1/acceptance/runs", json=ztan_body(fabric))
    assert r.status_code == 201, r.text
    assert r.json()["rows"] == 2 * len(ZTAN_ROWS)
    run_id = r.json()["id"]

    runs = api.get("/v1/acceptance/runs", params={"fabric": fabric}).json()
    assert [x["id"] for x in runs] == [run_id]
    assert runs[0]["rows"] == 8 and runs[0]["accepted"] is True and runs[0]["ranks"] == 16
    assert runs[0]["versions"] == {"nccl": "2.21.5", "nccl_tests": "2.13.10"} and "devices" not in runs[0]
    assert runs[0]["started_at"].startswith("2024-11-29T")  # 1732900000 epoch seconds

    got = api.get(f"/v1/acceptance/runs/{run_id}").json()
    assert len(got["devices"]) == 16 and got["devices"][8]["host"] == "node1"
    out_of_place = [x for x in got["rows"] if x["placement"] == "out_of_place"]
    assert [(x["size_bytes"], x["bucket"], x["busbw_gbps"]) for x in out_of_place] == [
        (s, s, bus) for s, _c, _t, _a, bus, *_ in ZTAN_ROWS]
    assert api.get("/v1/acceptance/runs/999999999").status_code == 404

    base = api.get("/v1/acceptance/baseline", params={"fabric": fabric, "op": "all_reduce"}).json()
    assert [(b["bucket"], b["ranks"], b["busbw_gbps"], b["runs"]) for b in base] == [
        (s, 16, bus, 1) for s, _c, _t, _a, bus, *_ in ZTAN_ROWS]


def test_baseline_best_vs_median_and_wrong_runs_excluded(api: httpx.Client) -> None:
    fabric = unique("fab")
    mib = 1 << 20
    for bus in (300.0, 330.0, 340.0):  # accepted runs; a size of 1.5 MiB falls in the 1 MiB bucket too
        rows = [row(mib, bus - 20), row(mib + mib // 2, bus), row(mib, 1.0, placement="in_place")]
        post_run(api, run_body(fabric, rows))
    post_run(api, run_body(fabric, [row(mib, 999.0, wrong=3)], wrong_total=3))  # wrong values: not accepted
    post_run(api, run_body(fabric, [row(mib, 999.0, wrong=None)], wrong_total=None, ranks=8, nodes=1))  # -c 0
    post_run(api, run_body(fabric, [row(mib, 50.0)], op="all_gather"))

    def get(**params: Any) -> list[tuple[str, int, int, float, int]]:
        r = api.get("/v1/acceptance/baseline", params={"fabric": fabric, **params})
        assert r.status_code == 200, r.text
        return [(b["op"], b["bucket"], b["ranks"], b["busbw_gbps"], b["runs"]) for b in r.json()]

    assert get(op="all_reduce", ranks=16, stat="best") == [("all_reduce", mib, 16, 340.0, 3)]
    assert get(op="all_reduce", ranks=16) == [("all_reduce", mib, 16, 330.0, 3)]  # median is the default
    assert get(op="all_reduce", nodes=1) == [("all_reduce", mib, 8, 999.0, 1)]  # -c 0 has no check: accepted
    assert get(op="all_gather") == [("all_gather", mib, 16, 50.0, 1)]
    assert len(get()) == 3
    runs = api.get("/v1/acceptance/runs", params={"fabric": fabric, "limit": 10}).json()
    assert sorted(x["accepted"] for x in runs) == [False, True, True, True, True, True]


def _bad(body: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    target: Any = body
    for p in path[:-1]:
        target = target[p]
    if value is _DROP:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


_DROP = object()


@pytest.mark.parametrize(("path", "value", "loc"), [
    (["fabric"], _DROP, ["body", "fabric"]),
    (["fabric"], "x" * 129, ["body", "fabric"]),
    (["op"], "all_to_all", ["body", "op"]),
    (["ranks"], "16", ["body", "ranks"]),
    (["ranks"], 0, ["body", "ranks"]),
    (["surprise"], 1, ["body", "surprise"]),
    (["labels"], {"bad-key": "v"}, ["body", "labels", "bad-key", "[key]"]),
    (["labels"], {"k": 3}, ["body", "labels", "k"]),
    (["rows"], [], ["body", "rows"]),
    (["rows", 0, "placement"], "sideways", ["body", "rows", 0, "placement"]),
    (["rows", 0, "wrong"], -1, ["body", "rows", 0, "wrong"]),
    (["rows", 0, "size_bytes"], 2**63, ["body", "rows", 0, "size_bytes"]),
    (["rows", 0, "extra"], True, ["body", "rows", 0, "extra"]),
    (["devices", 0, "host"], "h" * 257, ["body", "devices", 0, "host"]),
    (["library"], "mpi", ["body", "library"]),
    (["started_at"], 1.0, ["body", "started_at"]),
])
def test_bad_run_is_422_naming_the_field(api: httpx.Client, path: list[Any], value: Any, loc: list[Any]) -> None:
    body = _bad(run_body(unique("bad"), [row(1024, 1.0)], ranks=2), path, value)
    r = api.post("/v1/acceptance/runs", json=body)
    assert r.status_code == 422, r.text
    assert loc in [e["loc"] for e in r.json()["detail"]], r.json()


def test_size_bounds_and_non_finite_are_422(api: httpx.Client) -> None:
    body = run_body(unique("big"), [row(1024, 1.0)] * 10_001, ranks=2)
    r = api.post("/v1/acceptance/runs", json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "rows"], r.text[:300]
    body = run_body(unique("big"), [row(1024, 1.0)], ranks=2)
    body["devices"] = [{"rank": 0}] * 65_537
    r = api.post("/v1/acceptance/runs", json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "devices"], r.text[:300]
    raw = httpx.Request("POST", "/", json=run_body(unique("nan"), [row(1024, 1.0)], ranks=2)).content
    raw = raw.replace(b'"busbw_gbps":1.0', b'"busbw_gbps":NaN')
    r = api.post("/v1/acceptance/runs", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert ["body", "rows", 0, "busbw_gbps"] in [e["loc"] for e in r.json()["detail"]]
    for params, loc in (({"stat": "mean"}, "stat"), ({"ranks": 0}, "ranks"), ({"op": "nope"}, "op")):
        r = api.get("/v1/acceptance/baseline", params=params)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", loc]


def test_ingest_token_posts_read_token_reads(database_url: str, tmp_path: Path) -> None:
    from tests.support import start_service

    svc = start_service(database_url, tmp_path, env={"FABRICSCOPE_TOKENS": "ing-1:ingest;rd-2:read"})
    try:
        body = run_body(unique("auth"), [row(1024, 1.0)], ranks=2)
        assert httpx.post(f"{svc.url}/v1/acceptance/runs", json=body).status_code == 401
        read = {"Authorization": "Bearer rd-2"}
        assert httpx.post(f"{svc.url}/v1/acceptance/runs", json=body, headers=read).status_code == 403
        r = httpx.post(f"{svc.url}/v1/acceptance/runs", json=body, headers={"Authorization": "Bearer ing-1"})
        assert r.status_code == 201
        assert httpx.get(f"{svc.url}/v1/acceptance/runs/{r.json()['id']}", headers=read).status_code == 200
        assert httpx.get(f"{svc.url}/v1/acceptance/baseline").status_code == 401
    finally:
        svc.stop()


def test_migration_0004_downgrades_and_upgrades(test_database: TestDatabase, tmp_path: Path) -> None:
    db = TestDatabase.create(test_database.admin_url, tmp_path / "pg")
    try:
        cfg = _alembic_config(db.url)
        command.downgrade(cfg, "0003_webhook_secrets")
        with psycopg.connect(db.url) as conn:
            assert conn.execute("SELECT to_regclass('acceptance_runs')").fetchone() == (None,)
        command.upgrade(cfg, "head")
        with psycopg.connect(db.url) as conn:
            assert conn.execute("SELECT version_num FROM alembic_version").fetchone() is not None
            assert conn.execute("SELECT to_regclass('acceptance_rows')::text").fetchone() == ("acceptance_rows",)
    finally:
        db.drop()
