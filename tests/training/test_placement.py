"""Rank placement: host, local rank, GPU and NIC from overrides, NCCL env and the PCIe tree."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fabricscope.collectors.training import placement


def pcie_tree(root: Path) -> Path:
    """A two-socket PCIe layout as sysfs shows it: GPU0 and mlx5_0 under one root port switch,
    mlx5_1 and GPU4 under the other socket's root complex."""
    devs = {
        "gpu0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:3b:00.0",
        "mlx5_0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:3c:00.0",
        "mlx5_1": "pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:10.0/0000:86:00.0",
        "gpu4": "pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:08.0/0000:87:00.0",
    }
    for name, path in devs.items():
        d = root / "devices" / path
        d.mkdir(parents=True)
        addr = path.rsplit("/", 1)[1]
        (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
        os.symlink(d, root / "bus" / "pci" / "devices" / addr)
        if name.startswith("mlx5"):
            ib = root / "class" / "infiniband" / name
            ib.mkdir(parents=True)
            os.symlink(d, ib / "device")
    return root


def test_nearest_rdma_device_follows_the_pcie_tree(tmp_path: Path) -> None:
    root = pcie_tree(tmp_path)
    assert placement.rdma_devices(root) == ["mlx5_0", "mlx5_1"]
    assert placement.nearest_rdma_device("0000:3b:00.0", root) == "mlx5_0"
    assert placement.nearest_rdma_device("0000:87:00.0", root) == "mlx5_1"
    assert placement.nearest_rdma_device("0000:ff:00.0", root) is None  # no such GPU


@pytest.mark.parametrize(
    ("env", "gpu_pci", "local_rank", "nic"),
    [
        ({"NCCL_IB_HCA": "mlx5_1"}, "0000:3b:00.0", 0, "mlx5_1"),  # what NCCL was told wins
        ({"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}, "0000:87:00.0", 0, "mlx5_1"),  # several: the nearest
        ({"NCCL_IB_HCA": "mlx5_0,mlx5_1"}, None, 3, "mlx5_1"),  # no topology: spread by local rank
        ({"NCCL_IB_HCA": "^mlx5_1"}, "0000:87:00.0", 0, "mlx5_0"),  # excluded, even if nearer
        ({}, "0000:87:00.0", 0, "mlx5_1"),
        ({"NCCL_SOCKET_IFNAME": "=eth2"}, None, 0, "eth2"),
        ({"GLOO_SOCKET_IFNAME": "lo"}, None, 0, "lo"),
        ({"FABRICSCOPE_NIC": "mlx5_9", "NCCL_IB_HCA": "mlx5_0"}, None, 0, "mlx5_9"),  # the override
        ({}, None, 0, None),
    ],
)
def test_nic_choice(tmp_path: Path, env: dict[str, str], gpu_pci: str | None, local_rank: int,
                    nic: str | None) -> None:
    root = pcie_tree(tmp_path)
    got = placement.detect(0, local_rank=local_rank, gpu_pci=gpu_pci, env=env, sysfs_root=root)
    assert got.get("nic") == nic


def test_detect_defaults_and_overrides() -> None:
    got = placement.detect(4, env={"LOCAL_RANK": "1"}, sysfs_root="/nonexistent")
    assert got == {"rank": 4, "host": socket.gethostname(), "local_rank": 1}  # missing values absent
    got = placement.detect(4, host="node07", gpu="gpu3", nic="mlx5_2",
                           env={"FABRICSCOPE_HOST": "ignored", "LOCAL_RANK": "1"})
    assert got == {"rank": 4, "host": "node07", "local_rank": 1, "gpu": "gpu3", "nic": "mlx5_2"}
    assert placement.detect(0, env={"FABRICSCOPE_HOST": "n1", "FABRICSCOPE_GPU": "gpu7"})["gpu"] == "gpu7"


def test_this_machines_sysfs_is_read_without_error() -> None:
    # The real /sys: whatever RDMA devices exist are listed, an unknown GPU address finds none.
    assert isinstance(placement.rdma_devices("/sys"), list)
    assert placement.nearest_rdma_device("0000:ff:1f.7", "/sys") is None
