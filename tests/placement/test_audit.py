"""The placement audit (service/placement/audit.py) on its own: a known-good 8-GPU/8-NIC server
(the NCCL topology dump of an H100 machine, tests/fixtures/pcie) and one fault at a time."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from fabricscope.collectors.host import pcie
from fabricscope.service.placement.audit import FLAGS, audit, nccl_admits, warnings
from tests.placement import topo_tree

H100_TOPO = Path(__file__).resolve().parent.parent / "fixtures" / "pcie" / "ibm-h100-vsi-nccl-topo" / "topo.xml"
HCA_LIST = "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"  # what the dump's source page sets


def h100_ranks(tmp_path: Path, *, swap: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """One rank per GPU, each with the NIC the dump pairs it with (or two ranks' NICs swapped), and
    its locality as the hook reads it from the tree (no process affinity: an empty /proc)."""
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    proc.mkdir()
    pairs = topo_tree.build(H100_TOPO, sysfs)  # gpu<NCCL dev> -> its PCI address and the NIC beside it
    gpus = [f"gpu{i}" for i in range(8)]
    nics = [pairs[g]["nic"] for g in gpus]
    if swap:
        a, b = swap
        nics[a], nics[b] = nics[b], nics[a]
    ranks = []
    for i, gpu in enumerate(gpus):
        loc = pcie.locality(gpu_pci=pairs[gpu]["pci"], nic=nics[i], sysfs_root=sysfs, proc_root=proc)
        loc["nccl_ib_hca"] = HCA_LIST
        ranks.append({"rank": i, "host": "h100-a", "local_rank": i, "gpu": gpu, "nic": nics[i], "locality": loc})
    return ranks


def test_known_good_server_has_no_flags(tmp_path: Path) -> None:
    got = audit(h100_ranks(tmp_path))
    assert got["summary"] == dict.fromkeys(FLAGS, 0) and got["flagged_ranks"] == 0
    r0 = got["ranks"][0]
    assert r0["gpu"]["numa"] == r0["nic"]["numa"] == 0 and r0["nic"]["name"] == "mlx5_7"
    assert r0["gpu"]["pcie_root"] == r0["nic"]["pcie_root"] == "pci0000:a1"
    assert r0["gpu"]["pcie_root_port"] == "0000:a1:00.0" and r0["nic_nearest"] == "mlx5_7"
    assert warnings(got) == []


def test_swapping_two_nics_across_sockets_is_exactly_cross_numa(tmp_path: Path) -> None:
    got = audit(h100_ranks(tmp_path, swap=(0, 7)))  # gpu0 (node 0) <-> gpu7 (node 1)
    assert got["summary"] == {**dict.fromkeys(FLAGS, 0), "cross_numa": 2}
    assert [(r["rank"], r["flags"]) for r in got["ranks"] if r["flags"]] == [(0, ["cross_numa"]), (7, ["cross_numa"])]
    assert warnings(got) == ["cross_numa: 2 rank(s): 0 (h100-a), 7 (h100-a)"]


def test_swapping_within_a_socket_is_not_cross_numa(tmp_path: Path) -> None:
    got = audit(h100_ranks(tmp_path, swap=(0, 1)))
    assert got["summary"]["cross_numa"] == 0


def test_nccl_ib_hca_pinned_to_a_far_nic_is_a_mismatch(tmp_path: Path) -> None:
    ranks = h100_ranks(tmp_path)
    ranks[2]["locality"]["nccl_ib_hca"] = "=mlx5_0"  # gpu2's nearest is mlx5_5
    got = audit(ranks)
    assert got["summary"] == {**dict.fromkeys(FLAGS, 0), "nccl_env_mismatch": 1}
    assert got["ranks"][2]["nic_nearest"] == "mlx5_5"


def test_shared_nic_against_the_setting_and_the_job_label(tmp_path: Path) -> None:
    ranks = h100_ranks(tmp_path)
    ranks[1]["nic"] = ranks[0]["nic"]  # two GPUs through mlx5_7
    assert audit(ranks)["summary"]["shared_nic"] == 2
    assert audit(ranks, gpus_per_nic=2)["summary"]["shared_nic"] == 0
    assert audit(ranks, labels={"gpus_per_nic": "2"})["summary"]["shared_nic"] == 0
    assert audit(ranks, labels={"gpus_per_nic": "nonsense"})["summary"]["shared_nic"] == 2


def base_rank(**loc: Any) -> dict[str, Any]:
    return {"rank": 0, "host": "n1", "gpu": "gpu0", "nic": "mlx5_0",
            "locality": {"gpu_numa": 1, "nic_numa": 1, "gpu_pcie_path": ["pci0000:80", "0000:80:01.0"],
                         "nic_pcie_path": ["pci0000:80", "0000:80:01.0"], **loc}}


@pytest.mark.parametrize(
    ("loc", "flags"),
    [
        ({}, []),
        ({"cpu_numa": [0]}, ["rank_off_numa"]),
        ({"cpu_numa": [0, 1], "mem_nodes": [1]}, []),  # unpinned, but may run on the GPU's node
        ({"mem_nodes": [0]}, ["rank_off_numa"]),
        ({"gpu_link": {"gen": 4, "max_gen": 5, "width": 16, "max_width": 16}}, ["downtrained_link"]),
        ({"nic_link": {"gen": 5, "max_gen": 5, "width": 8, "max_width": 16}}, ["downtrained_link"]),
        ({"nic_link": {"gen": 5, "width": 16}}, []),  # no maximum known: not judged
        ({"nic_numa": 0}, ["cross_numa"]),
        ({"nic_numa": None}, []),
        ({"nccl_socket_ifname": "eth"}, ["nccl_env_mismatch"]),  # the nearest is mlx5_0
        # an RDMA device near the GPU: the socket interface is only NCCL's bootstrap
        ({"nccl_socket_ifname": "eth0", "nic_nearest": "mlx5_0"}, []),
        ({"nccl_ib_hca": "mlx5_1", "nic_nearest": "mlx5_0"}, ["nccl_env_mismatch"]),
        ({"nccl_ib_hca": "mlx5"}, []),  # a prefix admits mlx5_0
        ({"nccl_ib_hca": "^mlx5_0"}, ["nccl_env_mismatch"]),
    ],
)
def test_one_fact_one_flag(loc: dict[str, Any], flags: list[str]) -> None:
    assert audit([base_rank(**loc)])["ranks"][0]["flags"] == flags


def test_ranks_without_locality_are_listed_unflagged() -> None:
    got = audit([{"rank": 3, "host": "n1"}, {"rank": 1, "host": "n1", "gpu": "gpu1", "nic": "eth0"}])
    assert [r["rank"] for r in got["ranks"]] == [1, 3] and got["flagged_ranks"] == 0
    assert got["ranks"][0]["gpu"] == {"name": "gpu1", "pci": None, "numa": None, "pcie_root": None,
                                      "pcie_root_port": None, "pcie_switches": None, "pcie_path": None, "link": None}


@pytest.mark.parametrize(("spec", "name", "ok"), [("mlx5_0:1,mlx5_1:1", "mlx5_1", True), ("=mlx5_1", "mlx5_10", False),
                                                   ("mlx5_1", "mlx5_10", True), ("^=mlx5_1", "mlx5_10", True),
                                                   ("^mlx5", "mlx5_3", False), ("", "x", True)])
def test_nccl_device_list_matching(spec: str, name: str, ok: bool) -> None:
    assert nccl_admits(spec, name) is ok


def test_input_is_not_modified(tmp_path: Path) -> None:
    ranks = h100_ranks(tmp_path)
    before = copy.deepcopy(ranks)
    audit(ranks)
    assert ranks == before
