"""The GPU-to-NIC locality audit of one job: per rank its GPU and NIC side by side, and flags.

Pure: it takes the ranks as ``GET /v1/jobs/{job}`` returns them (each with the ``locality`` the
hook reported) and returns the audit; the route and the job report only fetch and serve it.

Flags (docs/http-api.md, "Placement and locality audit"):
- ``cross_numa``: the GPU and the NIC are on different NUMA nodes (GPUDirect RDMA crosses the
  inter-socket link).
- ``shared_nic``: the rank's NIC serves more distinct GPUs of its host than intended
  (``gpus_per_nic``: the job label, else the server setting, default 1).
- ``rank_off_numa``: the rank may run only on CPUs, or allocate only from memory nodes, none of
  which is the GPU's NUMA node.
- ``downtrained_link``: the GPU's or the NIC's PCIe link runs below its maximum generation or width.
- ``nccl_env_mismatch``: ``NCCL_IB_HCA`` does not admit the NIC nearest the GPU on the PCIe tree
  (NCCL's matching: ``=`` exact, ``^`` excludes, else prefix); without it, ``NCCL_SOCKET_IFNAME``
  where the rank runs over sockets (the hook found no RDMA device near the GPU).
A flag needs both of its facts; a rank that did not report them is not flagged.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fabricscope.collectors.training.placement import common_prefix

FLAGS = ("cross_numa", "shared_nic", "rank_off_numa", "downtrained_link", "nccl_env_mismatch")


def _host_nics(ranks: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per host, the NICs the job's ranks reported with their PCIe facts (name -> locality)."""
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in ranks:
        loc = r.get("locality") or {}
        if r.get("nic") and loc.get("nic_pcie_path") is not None:
            out[r["host"]].setdefault(r["nic"], loc)
    return out


def nearest_nic(loc: dict[str, Any], nics: dict[str, dict[str, Any]]) -> str | None:
    """Of ``nics``, the one sharing the longest PCIe path with the GPU (then: on its NUMA node).

    Ties keep the first in name order; None when the GPU's path is unknown or nothing shares a host
    bridge with it and no NIC is on its node."""
    gpu_path = loc.get("gpu_pcie_path")
    if gpu_path is None:
        return None
    best: tuple[int, int, str] | None = None
    for name in sorted(nics):
        nloc = nics[name]
        common = common_prefix(list(gpu_path), list(nloc.get("nic_pcie_path") or []))
        same_node = int(loc.get("gpu_numa") is not None and nloc.get("nic_numa") == loc.get("gpu_numa"))
        if common == 0 and not same_node:
            continue
        key = (common, same_node, name)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None


def nccl_admits(spec: str, name: str) -> bool:
    """Whether an NCCL device list (``NCCL_IB_HCA``, ``NCCL_SOCKET_IFNAME``) lets NCCL use ``name``."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    spec = spec.lstrip("=")
    names = [p.split(":", 1)[0].strip() for p in spec.split(",") if p.strip()]
    if not names:
        return True
    hit = any(name == n if exact else name.startswith(n) for n in names)
    return not hit if exclude else hit


def _downtrained(link: dict[str, Any] | None) -> bool:
    if not link:
        return False
    gen, max_gen, width, max_width = (link.get(k) for k in ("gen", "max_gen", "width", "max_width"))
    return bool((gen and max_gen and gen < max_gen) or (width and max_width and width < max_width))


def _gpus_per_nic(labels: dict[str, Any], default: int) -> int:
    value = labels.get("gpus_per_nic")
    try:
        n = int(value) if value is not None else default
    except (TypeError, ValueError):
        return default
    return n if n >= 1 else default


def audit(ranks: list[dict[str, Any]], *, labels: dict[str, Any] | None = None,
          gpus_per_nic: int = 1) -> dict[str, Any]:
    """``{"gpus_per_nic", "ranks": [...], "summary": {flag: ranks flagged}, "flagged_ranks"}``."""
    limit = _gpus_per_nic(labels or {}, gpus_per_nic)
    nics = _host_nics(ranks)
    gpus_on_nic: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in ranks:
        if r.get("nic") and r.get("gpu"):
            gpus_on_nic[(r["host"], r["nic"])].add(r["gpu"])
    out_ranks = []
    summary = dict.fromkeys(FLAGS, 0)
    for r in sorted(ranks, key=lambda x: x["rank"]):
        loc = r.get("locality") or {}
        gpu_numa, nic_numa = loc.get("gpu_numa"), loc.get("nic_numa")
        nearest = loc.get("nic_nearest") or nearest_nic(loc, nics.get(r["host"], {}))
        flags = []
        if gpu_numa is not None and nic_numa is not None and gpu_numa != nic_numa:
            flags.append("cross_numa")
        if r.get("nic") and len(gpus_on_nic.get((r["host"], r["nic"]), ())) > limit:
            flags.append("shared_nic")
        cpu_numa, mem_nodes = loc.get("cpu_numa"), loc.get("mem_nodes")
        if gpu_numa is not None and ((cpu_numa and gpu_numa not in cpu_numa)
                                     or (mem_nodes and gpu_numa not in mem_nodes)):
            flags.append("rank_off_numa")
        if _downtrained(loc.get("gpu_link")) or _downtrained(loc.get("nic_link")):
            flags.append("downtrained_link")
        # NCCL_SOCKET_IFNAME picks the NIC only where NCCL runs over sockets: a rank whose hook found
        # an RDMA device near its GPU (nic_nearest) uses it for bootstrap alone, so it is not judged.
        spec = loc.get("nccl_ib_hca") or (None if loc.get("nic_nearest") else loc.get("nccl_socket_ifname"))
        if spec and nearest and not nccl_admits(spec, nearest):
            flags.append("nccl_env_mismatch")
        for f in flags:
            summary[f] += 1
        out_ranks.append(_row(r, loc, nearest, flags))
    return {"gpus_per_nic": limit, "ranks": out_ranks, "summary": summary,
            "flagged_ranks": sum(1 for r in out_ranks if r["flags"])}


def _row(r: dict[str, Any], loc: dict[str, Any], nearest: str | None, flags: list[str]) -> dict[str, Any]:
    def side(prefix: str) -> dict[str, Any]:
        path = loc.get(f"{prefix}_pcie_path")
        bridges = [p for p in path or [] if not p.startswith("pci")]
        return {"pci": loc.get(f"{prefix}_pci"), "numa": loc.get(f"{prefix}_numa"),
                "pcie_root": path[0] if path else None, "pcie_root_port": bridges[0] if bridges else None,
                "pcie_switches": bridges[1:] if path is not None else None,
                "pcie_path": path, "link": loc.get(f"{prefix}_link")}

    row = {"rank": r["rank"], "host": r["host"], "local_rank": r.get("local_rank"),
           "gpu": {"name": r.get("gpu"), **side("gpu")}, "nic": {"name": r.get("nic"), **side("nic")},
           "nic_nearest": nearest, "cpus": loc.get("cpus"), "cpu_numa": loc.get("cpu_numa"),
           "mem_nodes": loc.get("mem_nodes"), "nccl_ib_hca": loc.get("nccl_ib_hca"),
           "nccl_socket_ifname": loc.get("nccl_socket_ifname"), "flags": flags}
    return row


def warnings(result: dict[str, Any]) -> list[str]:
    """One line per flag raised, for the job report's ``placement_warnings``."""
    out = []
    for flag in FLAGS:
        ranks = [r for r in result["ranks"] if flag in r["flags"]]
        if not ranks:
            continue
        shown = ", ".join(f"{r['rank']} ({r['host']})" for r in ranks[:8])
        more = f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
        out.append(f"{flag}: {len(ranks)} rank(s): {shown}{more}")
    return out
