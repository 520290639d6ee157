"""NCCL Inspector plugin output -> ``collectives`` records of docs/API.md.

The plugin (NVIDIA nccl ``plugins/profiler/inspector``) writes, per process, a stream of JSON
objects, one per collective per communicator: ``header`` (communicator id, rank, n_ranks),
``metadata`` (dump time, hostname) and ``coll_perf`` (coll, coll_sn, coll_msg_size_bytes,
coll_exec_time_us, bandwidths; with ``NCCL_INSPECTOR_DUMP_VERBOSE=1`` also ``event_trace_ts``).

Times: the duration is ``coll_exec_time_us``. The end is the last kernel stop of the verbose trace
when present, else the dump time (the plugin dumps shortly after completion, so this is an upper
bound within its dump interval); the start is end minus duration.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fabricscope.core.errors import ParseError

log = logging.getLogger("fabricscope.import.nccl_inspector")

# NCCL's collective names -> the op names the hook posts for torch.distributed calls.
OPS: dict[str, str] = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "AllToAll": "all_to_all",
    "Send": "send",
    "Recv": "recv",
    "SendRecv": "send_recv",
}


def iter_objects(text: str, name: str = "<input>") -> list[Any]:
    """All top-level JSON values of a file: JSON lines, concatenated or pretty-printed objects, or
    one array of them. A stretch that is not JSON is a ParseError naming the file and offset."""
    dec = json.JSONDecoder()
    out: list[Any] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            return out
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise ParseError(f"{name}: not JSON at character {e.pos}: {e.msg}") from e
        if isinstance(obj, list):
            out.extend(obj)
        else:
            out.append(obj)


def record(obj: Any) -> dict[str, Any]:
    """One Inspector object -> one collective dict (raises KeyError/TypeError/ValueError if bad)."""
    header, meta, perf = obj["header"], obj["metadata"], obj["coll_perf"]
    coll = str(perf["coll"])
    dur = float(perf["coll_exec_time_us"]) / 1e6
    trace = perf.get("event_trace_ts") or {}
    stops = [k["kernel_stop_ts"] for k in trace.get("kernel_events") or [] if k.get("kernel_stop_ts")]
    end_us = max(stops) if stops else meta["dump_timestamp_us"]
    end = float(end_us) / 1e6
    out: dict[str, Any] = {
        "rank": int(header["rank"]),
        "op": OPS.get(coll, coll.lower()),
        "seq": int(perf["coll_sn"]),
        "bytes": int(perf["coll_msg_size_bytes"]),
        "start": end - dur,
        "end": end,
        "group": str(header["id"]),
    }
    if header.get("n_ranks") is not None:
        out["group_size"] = int(header["n_ranks"])
    for src, dst in (("coll_busbw_gbs", "busbw_gbs"), ("coll_algobw_gbs", "algobw_gbs")):
        if perf.get(src) is not None:
            out[dst] = float(perf[src])
    return out


def parse(text: str, name: str = "<input>") -> tuple[list[dict[str, Any]], dict[int, str]]:
    """(collectives, rank -> hostname). Records missing fields are logged and skipped."""
    colls: list[dict[str, Any]] = []
    hosts: dict[int, str] = {}
    for i, obj in enumerate(iter_objects(text, name)):
        try:
            c = record(obj)
        except (KeyError, TypeError, ValueError) as e:
            log.warning("%s: record %d skipped: missing or bad field %s", name, i, e)
            continue
        colls.append(c)
        host = (obj.get("metadata") or {}).get("hostname")
        if host:
            hosts[c["rank"]] = str(host)
    return colls, hosts
