"""Where a rank runs: host, local rank, GPU and the NIC it talks through.

The NIC is what lets the correlation engine walk from a slow rank to a switch port, so it is worth
some effort: an explicit override first, then what NCCL itself was told (``NCCL_IB_HCA``), then
the PCIe topology in sysfs (the RDMA device sharing the longest PCIe path with the rank's GPU,
which is what NCCL picks by default), then the socket interface (``NCCL_SOCKET_IFNAME``,
``GLOO_SOCKET_IFNAME``). Absent when nothing says. The sysfs root is injectable for tests.

Standard library only; torch is consulted only when the caller hands in a GPU PCI address.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabricscope.collectors.host import pcie


def _name_list(value: str | None) -> list[str]:
    """Device names from an NCCL-style list: ``=mlx5_0:1,mlx5_1`` -> [mlx5_0, mlx5_1].

    An exclusion list (``^...``) names what is *not* used, so it says nothing about which is.
    """
    if not value:
        return []
    value = value.strip()
    if value.startswith("^"):
        return []
    value = value.lstrip("=")
    return [part.split(":", 1)[0].strip() for part in value.split(",") if part.strip()]


def _pci_path(sysfs_root: Path, link: Path) -> list[str]:
    """The PCIe path of a device (``pci0000:00/0000:00:01.0/0000:3b:00.0``), [] if unknown."""
    try:
        real = os.path.realpath(link)
    except OSError:
        return []
    parts = Path(real).parts
    devices = str(sysfs_root / "devices")
    if not real.startswith(devices):
        return []
    return [p for p in parts[len(Path(devices).parts):] if p.startswith("pci") or ":" in p]


def common_prefix(a: list[str], b: list[str]) -> int:
    """How many leading elements two PCIe paths share (root complex first): the deeper, the nearer."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def rdma_devices(sysfs_root: str | Path = "/sys") -> list[str]:
    d = Path(sysfs_root) / "class" / "infiniband"
    try:
        return sorted(p.name for p in d.iterdir())
    except OSError:
        return []


def nearest_rdma_device(gpu_pci: str, sysfs_root: str | Path = "/sys",
                        candidates: list[str] | None = None) -> str | None:
    """The RDMA device closest to the GPU at PCI address ``gpu_pci`` on the PCIe tree."""
    root = Path(sysfs_root)
    gpu = _pci_path(root, root / "bus" / "pci" / "devices" / gpu_pci.lower())
    if not gpu:
        return None
    best: tuple[int, str] | None = None
    for dev in candidates if candidates is not None else rdma_devices(root):
        path = _pci_path(root, root / "class" / "infiniband" / dev / "device")
        if not path:
            continue
        score = common_prefix(gpu, path)
        if best is None or score > best[0]:  # ties keep the first in name order
            best = (score, dev)
    return best[1] if best else None


def detect(
    rank: int,
    *,
    local_rank: int | None = None,
    host: str | None = None,
    gpu: str | None = None,
    gpu_pci: str | None = None,
    nic: str | None = None,
    env: Mapping[str, str] | None = None,
    sysfs_root: str | Path = "/sys",
) -> dict[str, Any]:
    """One ``ranks[]`` entry of ``PUT /v1/jobs/{job}`` for this process. Missing values are absent."""
    env = os.environ if env is None else env
    if local_rank is None and env.get("LOCAL_RANK", "").isdigit():
        local_rank = int(env["LOCAL_RANK"])
    out: dict[str, Any] = {"rank": rank, "host": host or env.get("FABRICSCOPE_HOST") or socket.gethostname()}
    if local_rank is not None:
        out["local_rank"] = local_rank
    gpu = gpu or env.get("FABRICSCOPE_GPU")
    if gpu:
        out["gpu"] = gpu
    nic = nic or env.get("FABRICSCOPE_NIC") or _nic_from_env_and_sysfs(env, gpu_pci, local_rank, sysfs_root)
    if nic:
        out["nic"] = nic
    return out


def _nic_from_env_and_sysfs(env: Mapping[str, str], gpu_pci: str | None, local_rank: int | None,
                            sysfs_root: str | Path) -> str | None:
    spec = env.get("NCCL_IB_HCA", "").strip()
    hcas = _name_list(spec)
    if len(hcas) == 1:
        return hcas[0]
    candidates = hcas or None
    if spec.startswith("^"):  # NCCL will not use these: neither may we
        excluded = set(_name_list(spec[1:]))
        candidates = [d for d in rdma_devices(sysfs_root) if d not in excluded]
    if gpu_pci:
        near = nearest_rdma_device(gpu_pci, sysfs_root, candidates)
        if near:
            return near
    if hcas:  # several allowed, no topology: NCCL spreads ranks over them in order
        return hcas[(local_rank or 0) % len(hcas)]
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        names = _name_list(env.get(var))
        if names:
            return names[(local_rank or 0) % len(names)]
    return None


def gpu_of_this_process(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(``gpuN`` with N the physical index, PCI bus id) of the current CUDA device, if torch has one.

    Only called when torch is already imported, so placement never pulls torch in itself.
    """
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None, None
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None, None
        idx = torch.cuda.current_device()
        env = os.environ if env is None else env
        visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        phys = visible[idx] if idx < len(visible) else str(idx)
        name = f"gpu{phys}" if phys.isdigit() else phys  # a UUID stays a UUID
        props = torch.cuda.get_device_properties(idx)
        pci = None
        if hasattr(props, "pci_bus_id"):
            dom = getattr(props, "pci_domain_id", 0)
            pci = f"{dom:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        return name, pci
    except Exception:  # placement is best effort; it must never break training
        return None, None


def locality(entry: Mapping[str, Any], *, gpu_pci: str | None = None, env: Mapping[str, str] | None = None,
             sysfs_root: str | Path = "/sys", proc_root: str | Path = "/proc") -> dict[str, Any]:
    """The ``locality`` of a ``ranks[]`` entry (docs/API.md): the rank's GPU and NIC on the PCIe tree,
    its CPU affinity and memory nodes, and what NCCL was told (``NCCL_IB_HCA``, ``NCCL_SOCKET_IFNAME``).

    Best effort: {} on any failure, so placement is still registered without it."""
    env = os.environ if env is None else env
    try:
        out = pcie.locality(gpu_pci=gpu_pci, nic=entry.get("nic"), sysfs_root=sysfs_root, proc_root=proc_root)
        if gpu_pci and out.get("gpu_pcie_path") is not None:
            # The NIC NCCL would pick by itself among those NCCL_IB_HCA leaves it (none listed: all).
            near = nearest_rdma_device(gpu_pci, sysfs_root)
            if near:
                out["nic_nearest"] = near
        for var, key in (("NCCL_IB_HCA", "nccl_ib_hca"), ("NCCL_SOCKET_IFNAME", "nccl_socket_ifname")):
            value = (env.get(var) or "").strip()
            if value:
                out[key] = value[:1024]
        return out
    except Exception:  # never into training: a rank without locality is only not audited
        return {}
