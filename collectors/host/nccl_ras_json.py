"""The JSON layout of an NCCL RAS status report (``SET FORMAT json``, NCCL 2.28.7+).

One object: ``nccl_version``, ``communicators`` (each with ``hash``, ``size``, ``ranks`` that answered,
with their ``status`` and ``collective_counts``, and ``missing_ranks`` flagged ``unresponsive`` /
``considered_dead``) and ``ras`` (``collection_time_sec``, ``timeouts_count``). NCCL writes
``"host": "unknown"`` and ``"pid": -1`` where it has no process for a rank: those are left out here.
Error codes are NCCL's ``ncclResult_t`` (0 success, 7 in progress; others are errors).
"""

from __future__ import annotations

import json
from typing import Any

from fabricscope.collectors.host.nccl_ras_report import Comm, Process, RankState, RasReport, norm_hash

_OK = (0, 7)  # ncclSuccess, ncclInProgress: not an error
_ERRORS = {1: "Unhandled CUDA error", 2: "System error", 3: "Internal error", 4: "Invalid argument",
           5: "Invalid usage", 6: "Remote process error", 8: "Timeout"}


def _int(v: Any) -> int | None:
    return v if type(v) is int else None


def _where(st: RankState, rank: dict[str, Any]) -> RankState:
    host, pid = rank.get("host"), _int(rank.get("pid"))
    st.host = host if isinstance(host, str) and host not in ("", "unknown") else None
    st.pid = pid if pid is not None and pid >= 0 else None
    cuda, nvml = _int(rank.get("cuda_dev")), _int(rank.get("nvml_dev"))
    if cuda is not None:
        st.gpu = str(cuda) if nvml in (None, cuda) else f"{cuda} (NVML {nvml})"
    return st


def _ranks(report: RasReport, comm: Comm, ranks: list[Any], where: str) -> None:
    counts: dict[str, dict[int, int]] = {}  # op -> rank -> operations launched
    for i, rank in enumerate(ranks):
        n, status = (_int(rank.get("rank")), rank.get("status")) if isinstance(rank, dict) else (None, None)
        if n is None or not isinstance(status, dict):
            report.problems.append(f"{where}.ranks[{i}]: no rank number or status: not read")
            continue
        for key, state in (("init_state", "init_error"), ("async_error", "async_error")):
            code = _int(status.get(key))
            if code is not None and code not in _OK:
                report.ranks.append(_where(RankState(comm.hash, n, state, nranks=comm.nranks,
                                                     detail=_ERRORS.get(code, f"error {code}")), rank))
        if status.get("abort_flag") is True:
            report.ranks.append(_where(RankState(comm.hash, n, "abort", nranks=comm.nranks), rank))
        ops = rank.get("collective_counts")
        for op, c in (ops.items() if isinstance(ops, dict) else ()):
            if _int(c) is not None:
                counts.setdefault(op, {})[n] = c
    by_rank = {r.get("rank"): r for r in ranks if isinstance(r, dict)}
    for op, per_rank in counts.items():
        top = max(per_rank.values())
        for n, c in sorted(per_rank.items()):
            if c < top:
                state = "behind" if c else "not_launched"
                report.ranks.append(_where(RankState(comm.hash, n, state, nranks=comm.nranks, op=op, count=c),
                                           by_rank[n]))


def _missing(report: RasReport, comm: Comm, missing: list[Any], where: str) -> None:
    for i, rank in enumerate(missing):
        n, status = (_int(rank.get("rank")), rank.get("status")) if isinstance(rank, dict) else (None, None)
        if n is None or not isinstance(status, dict):
            report.problems.append(f"{where}.missing_ranks[{i}]: no rank number or status: not read")
            continue
        # reachable but without the communicator: it is initialising or tearing it down
        state = ("dead" if status.get("considered_dead") is True else
                 "unresponsive" if status.get("unresponsive") is True else "nocomm")
        st = _where(RankState(comm.hash, n, state, nranks=comm.nranks), rank)
        report.ranks.append(st)
        procs = report.dead_processes if state == "dead" else report.unresponsive_processes
        if state != "nocomm" and st.pid is not None and st.host is not None \
                and all((p.pid, p.host) != (st.pid, st.host) for p in procs):
            procs.append(Process(st.pid, st.host, st.gpu))


def _comm(report: RasReport, c: Any, where: str) -> None:
    if not isinstance(c, dict) or not isinstance(c.get("hash"), str):
        report.problems.append(f"{where}: no communicator hash: not read")
        return
    comm = Comm(norm_hash(c["hash"]), nranks=_int(c.get("size")), ranks_seen=_int(c.get("ranks_count")))
    report.comms.append(comm)
    ranks, missing = c.get("ranks"), c.get("missing_ranks", [])
    if not isinstance(ranks, list) or not isinstance(missing, list):
        report.problems.append(f"{where}: ranks or missing_ranks is not a list: not read")
        return
    _ranks(report, comm, ranks, where)
    _missing(report, comm, missing, where)
    if missing:
        comm.errors.append("INCOMPLETE")


def parse_json(text: str) -> RasReport:
    report = RasReport(format="json")
    try:
        doc = json.loads(text)
    except ValueError as e:
        report.problems.append(f"not JSON: {e}")
        return report
    comms = doc.get("communicators") if isinstance(doc, dict) else None
    if not isinstance(comms, list):
        report.problems.append("no communicators list: not an NCCL RAS JSON report")
        return report
    if isinstance(v := doc.get("nccl_version"), str):
        report.nccl_version = v
    ras = doc.get("ras")
    if isinstance(ras, dict):
        t = ras.get("collection_time_sec")
        report.collection_s = float(t) if isinstance(t, int | float) and not isinstance(t, bool) else None
        report.timeouts = _int(ras.get("timeouts_count"))
    for i, c in enumerate(comms):
        _comm(report, c, f"communicators[{i}]")
    return report
