"""Acceptance runs, efficiency and the busbw_below_acceptance alert against the real service and DB."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.alerts.conftest import ADMIN, FAST_ENV, client, wait_for
from tests.support import ServiceProcess, TestDatabase, start_service

__all__ = ["ADMIN", "client", "wait_for"]

# Rows of a recorded all_reduce_perf run on 16 H100 ranks over 2 nodes
# (lessizzmore/create-a3mega-ztan-fork@02dd8f455c43, file ztan-NCCL-test-result): size, count,
# out-of-place time/algbw/busbw, in-place time/algbw/busbw; #wrong 0 throughout.
ZTAN_ROWS = [
    (1073741824, 268435456, 6759.0, 158.86, 297.86, 6737.4, 159.37, 298.82),
    (2147483648, 536870912, 12646.0, 169.81, 318.40, 12641.0, 169.88, 318.52),
    (4294967296, 1073741824, 24361.0, 176.31, 330.58, 24365.0, 176.27, 330.51),
    (8589934592, 2147483648, 47535.0, 180.71, 338.82, 47743.0, 179.92, 337.35),
]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def row(size: int, busbw: float, *, placement: str = "out_of_place", wrong: int | None = 0,
        time_us: float = 100.0) -> dict[str, Any]:
    return {"size_bytes": size, "count": size // 4, "type": "float", "redop": "sum", "root": -1,
            "placement": placement, "time_us": time_us, "algbw_gbps": busbw / 2, "busbw_gbps": busbw,
            "wrong": wrong}


def run_body(fabric: str, rows: list[dict[str, Any]], *, op: str = "all_reduce", ranks: int = 16, nodes: int = 2,
             wrong_total: int | None = 0, **extra: Any) -> dict[str, Any]:
    return {"fabric": fabric, "labels": {"site": "a"}, "op": op, "library": "nccl", "started_at": 1732900000.0,
            "ranks": ranks, "nodes": nodes, "threads": 1, "gpus_per_thread": 1,
            "versions": {"nccl": "2.21.5", "nccl_tests": "2.13.10"},
            "command": "all_reduce_perf -b 8 -e 8G -f 2 -g 1",
            "devices": [{"rank": r, "group": 0, "pid": 6899 + r, "host": f"node{r // 8}", "device": r % 8,
                         "bus_id": "0000:04:00", "name": "NVIDIA H100 80GB HBM3"} for r in range(ranks)],
            "rows": rows, "avg_busbw_gbps": 70.742, "wrong_total": wrong_total, "source": "all_reduce_perf.txt",
            "problems": [], **extra}


def ztan_body(fabric: str) -> dict[str, Any]:
    rows = []
    for size, count, t_o, alg_o, bus_o, t_i, alg_i, bus_i in ZTAN_ROWS:
        for placement, t, alg, bus in (("out_of_place", t_o, alg_o, bus_o), ("in_place", t_i, alg_i, bus_i)):
            rows.append({"size_bytes": size, "count": count, "type": "float", "redop": "sum", "root": -1,
                         "placement": placement, "time_us": t, "algbw_gbps": alg, "busbw_gbps": bus, "wrong": 0})
    return run_body(fabric, rows)


def post_run(api: httpx.Client, body: dict[str, Any]) -> int:
    r = api.post("/v1/acceptance/runs", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


# --- a database and service of the test's own, with the alert loops fast (as tests/alerts does)

@pytest.fixture
def own_service(test_database: TestDatabase, tmp_path: Path) -> Iterator[Callable[..., ServiceProcess]]:
    db = TestDatabase.create(test_database.admin_url, tmp_path / "pg")
    started: list[ServiceProcess] = []

    def make(**env: str) -> ServiceProcess:
        svc = start_service(db.url, tmp_path, env={**FAST_ENV, **env})
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()
    db.drop()


def alerts(api: httpx.Client, job: str) -> list[dict[str, Any]]:
    r = api.get("/v1/alerts", params={"job": job})
    assert r.status_code == 200, r.text
    return list(r.json())
