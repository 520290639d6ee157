"""GPU telemetry for the host agent: NVML (``nvml.py``), a dcgm-exporter scrape (``dcgm.py``), and
pure parsers of ``nvidia-smi -q -x`` (``smi_xml.py``) and ``nvidia-smi topo -m`` (``topo_matrix.py``).
Mapping tables: ``maps.py``. Sources are ``host:gpuN`` with N the NVML index.

``FORMATS`` registers the three recorded-output formats with ``fabricscope parse``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fabricscope.collectors.formats import Format, Reading
from fabricscope.collectors.host.gpu.dcgm import DcgmCollector, looks_like_dcgm, parse_dcgm, xid_event
from fabricscope.collectors.host.gpu.nvml import NvmlCollector, load_nvml
from fabricscope.collectors.host.gpu.smi_xml import SmiCollector, looks_like_smi_xml, parse_smi_xml, unread_counts
from fabricscope.collectors.host.gpu.topo_matrix import TopoMatrix, looks_like_topo, parse_topo_matrix, rank
from fabricscope.core.model import Event, Sample

__all__ = ["DcgmCollector", "NvmlCollector", "SmiCollector", "TopoMatrix", "load_nvml", "make_gpu_collector",
           "parse_dcgm", "parse_smi_xml", "parse_topo_matrix"]


def make_gpu_collector(host: str, source: str, dcgm_url: str, *, timeout_s: float = 5.0,
                       emit: Callable[[Event], None] | None = None, lib: Any = None,
                       smi_binary: str = "nvidia-smi") -> NvmlCollector | DcgmCollector | SmiCollector | None:
    """The collector the agent config names; None where NVML is unusable (already logged)."""
    if source == "dcgm":
        return DcgmCollector(host, dcgm_url, timeout_s=timeout_s, emit=emit)
    if source == "smi":
        return SmiCollector(host, smi_binary, timeout_s=timeout_s)
    return NvmlCollector.open(host, lib, emit=emit)


def _read_smi_xml(path: Path, device: str, ts: float) -> Reading:
    text = path.read_text()
    return Reading(samples=parse_smi_xml(text, ts, device), unmapped=unread_counts(text))


def _read_dcgm(path: Path, device: str, ts: float) -> Reading:
    r = parse_dcgm(path.read_text(), ts, device)
    events = [xid_event(src, code, ts) for src, code in r.xids.items() if code]
    return Reading(samples=r.samples, events=events, unmapped=r.unmapped, problems=r.problems)


def _read_topo(path: Path, device: str, ts: float) -> Reading:
    """What ``fabricscope parse`` shows of a topology matrix: one extra (non-canonical) sample
    ``gpu_nic_locality_rank`` per GPU/NIC pair, labelled ``nic`` and ``connection`` (PIX..SYS), value
    the rank of that connection (lower = closer, ``topo_matrix.rank``), and the GPU's ``cpu_affinity`` and
    ``numa_affinity`` where printed. The agent does not send it; the data structure itself is
    ``topo_matrix.parse_topo_matrix``. ``gpu_peer_locality_rank`` likewise per GPU pair (label ``peer``).
    Cells that could not be placed are the reading's problems."""
    topo = parse_topo_matrix(path.read_text())
    samples: list[Sample] = []
    for gpu in topo.gpus:
        src = f"{device}:gpu{gpu.removeprefix('GPU')}"
        for nic in topo.nics:
            conn = topo.link(gpu, nic)
            if conn is not None:
                affinity = {k: v for k, v in (("cpu_affinity", topo.cpu_affinity.get(gpu)),
                                              ("numa_affinity", topo.numa_affinity.get(gpu))) if v is not None}
                samples.append(Sample(ts, src, "gpu_nic_locality_rank", float(rank(conn)),
                                      {"nic": topo.nic_names.get(nic, nic), "connection": conn, **affinity}))
        for peer in topo.gpus:  # GPU to GPU (NV#, or PCIe): also what a matrix without NICs has to say
            conn = topo.link(gpu, peer)
            if peer != gpu and conn is not None:
                samples.append(Sample(ts, src, "gpu_peer_locality_rank", float(rank(conn)),
                                      {"peer": f"gpu{peer.removeprefix('GPU')}", "connection": conn}))
    problems = list(topo.problems)
    problems += [] if topo.nics else ["no NIC in the matrix: " + json.dumps(
        {"gpus": list(topo.gpus), "cpu_affinity": topo.cpu_affinity, "numa_affinity": topo.numa_affinity})]
    return Reading(samples=samples, problems=problems, guesses=list(topo.guesses))


FORMATS = (
    Format("nvidia-smi-xml", "`nvidia-smi -q -x`: clocks, throttle reasons, power, ECC, PCIe link per GPU",
           sniff=lambda _p, head: looks_like_smi_xml(head), read=_read_smi_xml),
    Format("nvidia-smi-topo", "`nvidia-smi topo -m`: GPU/NIC connection types (PIX..SYS, NV#), CPU/NUMA affinity",
           sniff=lambda _p, head: looks_like_topo(head), read=_read_topo),
    Format("dcgm-exporter", "dcgm-exporter /metrics (Prometheus text, DCGM_FI_* fields); XID as events",
           sniff=lambda _p, head: looks_like_dcgm(head), read=_read_dcgm, priority=50),
)
