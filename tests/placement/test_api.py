"""GET /v1/jobs/{job}/placement, the locality of PUT /v1/jobs/{job} and the report's warnings,
through the real service and database."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.placement.test_audit import h100_ranks


def _job() -> str:
    return f"place-{uuid.uuid4().hex[:8]}"


def test_audit_of_a_stored_job_with_two_nics_swapped(api: httpx.Client, tmp_path: Path) -> None:
    job = _job()
    ranks = h100_ranks(tmp_path, swap=(0, 7))
    r = api.put(f"/v1/jobs/{job}", json={"ranks": ranks, "labels": {"fabric": "h100"}})
    assert r.status_code == 200, r.text
    stored = api.get(f"/v1/jobs/{job}").json()["ranks"]
    assert stored[0]["locality"] == ranks[0]["locality"]  # kept as sent, in its own column

    got = api.get(f"/v1/jobs/{job}/placement").json()
    assert got["job"] == job and got["gpus_per_nic"] == 1
    assert got["summary"] == {"cross_numa": 2, "shared_nic": 0, "rank_off_numa": 0, "downtrained_link": 0,
                              "nccl_env_mismatch": 0}
    r0 = got["ranks"][0]
    assert r0["flags"] == ["cross_numa"] and r0["gpu"]["numa"] == 0 and r0["nic"]["numa"] == 1
    assert r0["nic"]["name"] == "mlx5_0" and r0["nic_nearest"] == "mlx5_7"
    assert r0["gpu"]["pcie_root"] == "pci0000:a1" and r0["nic"]["pcie_root"] == "pci0000:e7"

    report = api.get(f"/v1/jobs/{job}/report").json()
    assert report["placement_warnings"] == ["cross_numa: 2 rank(s): 0 (h100-a), 7 (h100-a)"]


def test_known_good_job_has_no_warnings_and_a_label_sets_gpus_per_nic(api: httpx.Client, tmp_path: Path) -> None:
    job = _job()
    ranks = h100_ranks(tmp_path)
    ranks[1]["nic"] = ranks[0]["nic"]
    ranks[1]["locality"] = {k: v for k, v in ranks[1]["locality"].items() if not k.startswith("nic_")}
    assert api.put(f"/v1/jobs/{job}", json={"ranks": ranks}).status_code == 200
    assert api.get(f"/v1/jobs/{job}/placement").json()["summary"]["shared_nic"] == 2
    assert api.put(f"/v1/jobs/{job}", json={"labels": {"gpus_per_nic": 2}}).status_code == 200
    got = api.get(f"/v1/jobs/{job}/placement").json()
    assert got["gpus_per_nic"] == 2 and got["flagged_ranks"] == 0
    assert api.get(f"/v1/jobs/{job}/report").json()["placement_warnings"] == []


def test_unknown_job_is_404(api: httpx.Client) -> None:
    assert api.get(f"/v1/jobs/{_job()}/placement").status_code == 404


GOOD: dict[str, Any] = {"gpu_pci": "0000:a4:00.0", "gpu_numa": 0, "gpu_pcie_path": ["pci0000:a1", "0000:a1:00.0"]}


@pytest.mark.parametrize(
    ("locality", "loc"),
    [
        ({"gpu_numa": -1}, ["gpu_numa"]),
        ({"nic_numa": 1024}, ["nic_numa"]),
        ({"gpu_numa": "0"}, ["gpu_numa"]),
        ({"gpu_pci": "3b:00.0"}, ["gpu_pci"]),
        ({"nic_pcie_path": ["pci0000:00", "../etc"]}, ["nic_pcie_path", 1]),
        ({"gpu_pcie_path": ["0000:00:01.0"] * 33}, ["gpu_pcie_path"]),
        ({"gpu_link": {"gen": 8}}, ["gpu_link", "gen"]),
        ({"nic_link": {"width": 0}}, ["nic_link", "width"]),
        ({"nic_link": {"speed": "32 GT/s"}}, ["nic_link", "speed"]),
        ({"cpus": "0-3;reboot"}, ["cpus"]),
        ({"mem_nodes": [0, -2]}, ["mem_nodes", 1]),
        ({"nccl_ib_hca": "m" * 1025}, ["nccl_ib_hca"]),
        ({"nccl_socket_ifname": "eth\x000"}, ["nccl_socket_ifname"]),
    ],
)
def test_bad_locality_is_422_naming_the_field(api: httpx.Client, locality: dict[str, Any], loc: list[Any]) -> None:
    job = _job()
    body = {"ranks": [{"rank": 0, "host": "n1"}, {"rank": 1, "host": "n1", "locality": {**GOOD, **locality}}]}
    r = api.put(f"/v1/jobs/{job}", json=body)
    assert r.status_code == 422, r.text
    assert any(e["loc"][:4 + len(loc)] == ["body", "ranks", 1, "locality", *loc] for e in r.json()["detail"]), r.json()
    assert api.get(f"/v1/jobs/{job}").status_code == 404  # nothing of it stored


def test_locality_not_an_object_is_422(api: httpx.Client) -> None:
    r = api.put(f"/v1/jobs/{_job()}", json={"ranks": [{"rank": 0, "host": "n1", "locality": [1]}]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:4] == ["body", "ranks", 0, "locality"]
