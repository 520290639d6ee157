"""NCCL Inspector plugin output -> ``collectives`` records of docs/API.md.

The plugin (NVIDIA nccl ``plugins/profiler/inspector``) writes, per process, JSON objects. Every
published format version is read (``metadata.inspector_output_format_version``):

- v4.0: one object per operation: ``header`` (communicator ``id``, ``rank``, ``n_ranks``, ``nnodes``;
  later ``comm_name``), ``metadata`` (dump time, hostname, pid) and ``coll_perf`` (coll, coll_sn,
  coll_msg_size_bytes, coll_exec_time_us, bandwidths; with ``NCCL_INSPECTOR_DUMP_VERBOSE=1`` also
  ``event_trace_sn``/``event_trace_ts``) or ``p2p_perf`` (p2p "Send"/"Recv", p2p_sn, p2p_peer,
  p2p_msg_size_bytes, p2p_exec_time_us, bandwidths: pipeline-parallel send/recv).
- v4.1 adds a per-dump ``dump_stats`` record; v4.2 adds ``coll_algo`` and ``coll_proto``.
- v4.3/v4.4 write ``header``/``metadata`` once, in the ``dump_stats`` marker, and the records after
  it carry only their ``coll_perf``/``p2p_perf``/``proxy_trace`` object: the marker's context is kept.

The communicator name, algorithm, protocol and p2p peer are kept in each record's ``labels`` (the
service ignores keys it does not know). A field no published version writes is listed once.

Times: the duration is ``*_exec_time_us``. The end is the last kernel stop of the verbose trace
when present, else the dump time (the plugin dumps shortly after completion, so this is an upper
bound within its dump interval); the start is end minus duration.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from fabricscope.core.errors import ParseError
from fabricscope.core.values import counter, gauge

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


# Fields the published versions write (a field outside these is listed once, never guessed at).
_HEADER = {"id", "comm_name", "rank", "n_ranks", "nnodes"}
_METADATA = {"inspector_output_format_version", "git_rev", "rec_mechanism", "dump_timestamp_us", "hostname",
             "pid"}
_PERF = {"", "_sn", "_msg_size_bytes", "_exec_time_us", "_timing_source", "_algobw_gbs", "_busbw_gbs",
         "_algo", "_proto", "_peer"}  # after the record's prefix ("coll", "p2p")
_TRACE = {"event_trace_sn", "event_trace_ts"}
KINDS = {"coll_perf": "coll", "p2p_perf": "p2p"}  # record kind -> its field prefix
_SKIPPED = ("proxy_trace",)  # verbose proxy records: read by nothing here, counted
_LABELS = (("header", "comm_name", "comm_name"), ("perf", "_algo", "algo"), ("perf", "_proto", "proto"),
           ("perf", "_peer", "peer"))


@dataclass
class InspectorReading:
    collectives: list[dict[str, Any]] = field(default_factory=list)
    hosts: dict[int, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    unknown: set[str] = field(default_factory=set)  # "coll_perf.x", "header.y": fields not read
    versions: set[str] = field(default_factory=set)
    header: Any = None  # the last dump marker's context (v4.3+), carried to the next call by a tail
    meta: Any = None


def record(obj: Any, kind: str = "coll_perf", header: Any = None, meta: Any = None) -> dict[str, Any]:
    """One Inspector operation -> one collective dict (raises KeyError/TypeError/ValueError if bad).
    ``header``/``meta``: the dump marker's, for v4.3+ records that carry none of their own."""
    header = obj.get("header") or header
    meta = obj.get("metadata") or meta
    perf, pre = obj[kind], KINDS[kind]
    name = perf[pre]
    if not isinstance(name, str) or not name:
        raise ValueError(f"{pre} {name!r} is not an operation name")
    dur = gauge(perf[f"{pre}_exec_time_us"]) / 1e6
    if dur < 0:
        raise ValueError(f"{pre}_exec_time_us is negative")
    trace = perf.get("event_trace_ts") or {}
    stops = [k["kernel_stop_ts"] for k in trace.get("kernel_events") or [] if k.get("kernel_stop_ts")]
    end_us = max(stops) if stops else meta["dump_timestamp_us"]
    end = float(end_us) / 1e6
    out: dict[str, Any] = {
        "rank": int(counter(header["rank"])),
        "op": OPS.get(name, name.lower()),
        "seq": int(counter(perf[f"{pre}_sn"])),
        "bytes": int(counter(perf[f"{pre}_msg_size_bytes"])),
        "start": end - dur,
        "end": end,
        "group": str(header["id"]),
    }
    if header.get("n_ranks") is not None:
        out["group_size"] = int(counter(header["n_ranks"]))
    for src, dst in (("_busbw_gbs", "busbw_gbs"), ("_algobw_gbs", "algobw_gbs")):
        if perf.get(pre + src) is not None:
            out[dst] = gauge(perf[pre + src])
    labels = {label: str(v) for where, key, label in _LABELS
              if (v := (header.get(key) if where == "header" else perf.get(pre + key))) is not None}
    if labels:
        out["labels"] = labels
    return out


def _unknown(out: InspectorReading, obj: dict[str, Any], kind: str) -> None:
    pre = KINDS[kind]
    perf = obj[kind] if isinstance(obj[kind], dict) else {}
    out.unknown |= {f"{kind}.{k}" for k in perf if k not in _TRACE and k.removeprefix(pre) not in _PERF}
    for part, known in (("header", _HEADER), ("metadata", _METADATA)):
        if isinstance(obj.get(part), dict):
            out.unknown |= {f"{part}.{k}" for k in obj[part] if k not in known}
    out.unknown |= {k for k in obj if k not in (kind, "header", "metadata")}


def read(text: str, name: str = "<input>") -> InspectorReading:
    """Every operation record of a file; a bad record is skipped and named, the rest kept."""
    return read_objects(iter_objects(text, name), name)


def read_objects(objs: list[Any], name: str = "<input>", header: Any = None, meta: Any = None) -> InspectorReading:
    """:func:`read` of objects already decoded. ``header``/``meta``: the context a v4.3+ dump marker
    before them set (a tail reading a file piece by piece passes the last call's ``.header``/``.meta``)."""
    out = InspectorReading()
    skipped = 0
    for i, obj in enumerate(objs):
        if not isinstance(obj, dict):
            out.problems.append(f"{name}: record {i} skipped: not a JSON object")
            continue
        if isinstance(obj.get("metadata"), dict):
            version = obj["metadata"].get("inspector_output_format_version")
            if version:
                out.versions.add(str(version))
        if "dump_stats" in obj:  # v4.1+: the marker; from v4.3 on it holds the context of what follows
            header, meta = obj.get("header") or header, obj.get("metadata") or meta
            continue
        kinds = [k for k in KINDS if k in obj]
        if not kinds:
            if any(k in obj for k in _SKIPPED):
                skipped += 1
            else:
                out.problems.append(f"{name}: record {i} skipped: no coll_perf or p2p_perf "
                                    f"(keys: {', '.join(sorted(obj))[:120]})")
            continue
        for kind in kinds:
            _unknown(out, obj, kind)
            try:
                c = record(obj, kind, header, meta)
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
                out.problems.append(f"{name}: record {i} skipped ({kind}): missing or bad field {e}")
                continue
            out.collectives.append(c)
            host = (obj.get("metadata") or meta or {}).get("hostname")
            if host:
                out.hosts[c["rank"]] = str(host)
    if skipped:
        out.problems.append(f"{name}: {skipped} proxy_trace records not read (proxy steps are not collectives)")
    if out.unknown:
        out.problems.append(f"{name}: fields not read (no published Inspector version writes them): "
                            + ", ".join(sorted(out.unknown)))
    out.header, out.meta = header, meta
    return out


def parse(text: str, name: str = "<input>") -> tuple[list[dict[str, Any]], dict[int, str]]:
    """(collectives, rank -> hostname). What was skipped or not read is logged once per file."""
    got = read(text, name)
    for p in got.problems:
        log.warning("%s", p)
    return got.collectives, got.hosts
