"""The Job overview's "Placement: flagged ranks" table agrees with GET /v1/jobs/{job}/placement."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg

from tests.placement.test_audit import h100_ranks
from tools.dashboard_placement import PLACEMENT_SQL
from tools.grafana_sql import Context, expand


def test_panel_flags_are_the_api_flags(api: httpx.Client, database_url: str, tmp_path: Path) -> None:
    job = f"panel-{uuid.uuid4().hex[:8]}"
    ranks = h100_ranks(tmp_path, swap=(0, 7))  # cross_numa on ranks 0 and 7
    for r in ranks:
        r["locality"]["nic_nearest"] = {0: "mlx5_7", 7: "mlx5_0"}.get(r["rank"], r["nic"])  # as the hook reports it
    ranks[2]["locality"]["nccl_ib_hca"] = "=mlx5_0"  # not gpu2's nearest (mlx5_5)
    ranks[3]["locality"]["cpu_numa"] = [1]  # gpu3 is on node 0
    ranks[4]["locality"]["nic_link"] = {"gen": 4, "max_gen": 5, "width": 16, "max_width": 16}
    ranks[6]["nic"] = ranks[5]["nic"]  # two GPUs through one NIC
    ranks[6]["locality"]["nic_nearest"] = "mlx5_1"
    ranks[1]["locality"]["nccl_ib_hca"] = "^mlx5_6"  # excludes its own nearest NIC
    assert api.put(f"/v1/jobs/{job}", json={"ranks": ranks}).status_code == 200

    audit = api.get(f"/v1/jobs/{job}/placement").json()
    want = {r["rank"]: ", ".join(r["flags"]) for r in audit["ranks"] if r["flags"]}
    assert set(want) == {0, 1, 2, 3, 4, 5, 6, 7}  # every rule fired somewhere

    now = datetime.now(UTC)
    sql = expand(PLACEMENT_SQL, Context(now - timedelta(hours=1), now, {"job": [job]}))
    with psycopg.connect(database_url, autocommit=True) as conn:
        cur = conn.execute(sql)
        cols = [d.name for d in cur.description or []]
        rows = [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
    assert {r["rank"]: r["flags"] for r in rows} == want
    assert want[5] == want[6] == "shared_nic" and want[2] == "nccl_env_mismatch"
    assert rows[0]["gpu_root"] == "pci0000:a1" and rows[0]["nic_root"] == "pci0000:e7"
