"""The training hook sends its rank's locality with the placement, and never fails training over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricscope.collectors.host import pcie
from fabricscope.collectors.training import Recorder, placement
from tests.placement import topo_tree
from tests.placement.test_audit import H100_TOPO
from tests.sinks.receiver import Receiver

VM = Path(__file__).resolve().parent.parent / "fixtures" / "pcie" / "vm-virtio-net"


@pytest.fixture
def recv() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def test_locality_of_a_rank_on_the_h100_server(tmp_path: Path) -> None:
    pairs = topo_tree.build(H100_TOPO, tmp_path)
    env = {"NCCL_IB_HCA": "=mlx5_0", "NCCL_SOCKET_IFNAME": "eth0"}
    loc = placement.locality({"rank": 5, "host": "h", "nic": "mlx5_0"}, gpu_pci=pairs["gpu5"]["pci"], env=env,
                             sysfs_root=tmp_path, proc_root=VM / "proc")
    assert loc["gpu_pci"] == "0000:d6:00.0" and loc["gpu_numa"] == 1 and loc["nic_numa"] == 1
    assert loc["nic_nearest"] == "mlx5_2"  # what NCCL would pick for gpu5 if left alone
    assert loc["nccl_ib_hca"] == "=mlx5_0" and loc["nccl_socket_ifname"] == "eth0"
    assert loc["cpus"] == "0-1" and loc["cpu_numa"] == [0] and loc["mem_nodes"] == [0]


def test_hook_puts_locality_with_the_placement(recv: Receiver, tmp_path: Path) -> None:
    topo_tree.build(H100_TOPO, tmp_path / "sys")
    rec = Recorder(recv.url, "loc", rank=2, local_rank=2, host="h100-a", gpu="gpu2", spool=tmp_path / "spool",
                   env={"NCCL_IB_HCA": "mlx5_5"}, collectives=False, job_labels=False, flush_interval_s=0.05,
                   sysfs_root=tmp_path / "sys").start()
    rec.flush(5)
    puts = [r for r in recv.requests if r.method == "PUT"]
    assert len(puts) == 1
    entry = puts[0].body["ranks"][0]
    assert entry["nic"] == "mlx5_5"
    assert entry["locality"]["nic_pci"] == "0000:b7:00.0" and entry["locality"]["nic_numa"] == 0
    assert entry["locality"]["nccl_ib_hca"] == "mlx5_5"
    rec.close()


def test_a_failing_reader_leaves_the_placement_without_locality(recv: Receiver, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(**_kw: object) -> dict[str, object]:
        raise RuntimeError("sysfs exploded")

    monkeypatch.setattr(pcie, "locality", boom)
    rec = Recorder(recv.url, "loc2", rank=0, host="n1", spool=tmp_path, env={"NCCL_IB_HCA": "mlx5_1"},
                   collectives=False, job_labels=False, flush_interval_s=0.05).start()
    rec.flush(5)
    puts = [r for r in recv.requests if r.method == "PUT"]
    assert puts[0].body == {"ranks": [{"rank": 0, "host": "n1", "nic": "mlx5_1"}]}
    assert rec.stats["errors"] == 0  # not an error of the hook: placement went out
    rec.close()
