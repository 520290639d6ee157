"""PyTorch profiler (Kineto) Chrome traces -> ``steps`` and ``collectives`` records of docs/API.md.

- Steps: the ``ProfilerStep#N`` annotations (CPU side), one step each.
- Collectives: the NCCL GPU kernels (``ncclKernel_*``/``ncclDevKernel_*``), timed on the GPU. The
  op, size and group come, in order of preference, from the kernel's own args (newer PyTorch), the
  ``record_param_comms`` op sharing its External id, or the ``nccl:<op>`` annotation enclosing the
  kernel's launch (linked by correlation id to the ``cudaLaunchKernel`` call). The step is the
  ProfilerStep in which the kernel was *launched*.

Times: ``ts`` is in microseconds, relative to ``baseTimeNanoseconds`` when the trace has it (newer
Kineto), else already Unix epoch microseconds. The seq number is the collective's ordinal per
group within the trace (the trace does not carry NCCL's own), so it lines up across ranks only for
traces of the same window.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from pathlib import Path
from typing import Any

from fabricscope.core.errors import ParseError

# Names seen in kernel args ("allreduce"), annotations ("nccl:_all_gather_base") and kernel names
# ("AllReduce") -> the op names the hook posts for the torch.distributed call.
OPS: dict[str, str] = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "AllReduce": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "AllGather": "all_gather",
    "_all_gather_base": "all_gather_into_tensor", "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "all_gather_into_tensor": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor", "ReduceScatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "Broadcast": "broadcast",
    "reduce": "reduce", "Reduce": "reduce",
    "all_to_all": "all_to_all", "alltoall": "all_to_all", "all_to_allv": "all_to_all",
    "alltoall_base": "all_to_all_single", "all_to_all_single": "all_to_all_single",
    "barrier": "barrier", "send": "send", "recv": "recv", "SendRecv": "send_recv",
}

# Element sizes for the dtype spellings of kernel args ("Float") and of record shapes ("float").
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "c10::half": 2,
    "bfloat16": 2, "c10::bfloat16": 2, "long": 8, "long int": 8, "int64": 8, "int": 4, "int32": 4,
    "short": 2, "int16": 2, "char": 1, "signed char": 1, "int8": 1, "byte": 1, "unsigned char": 1,
    "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1, "complexfloat": 8, "complexdouble": 16,
}

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


def load(path: str | Path) -> dict[str, Any]:
    """Read a trace file (``.json`` or ``.json.gz``)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, ValueError, EOFError) as e:
        raise ParseError(f"{p}: not a readable Kineto trace: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ParseError(f"{p}: no traceEvents list: not a Chrome/Kineto trace")
    return data


def _nbytes(nelems: Any, dtype: Any) -> int | None:
    size = DTYPE_BYTES.get(str(dtype).strip().lower())
    if size is None or not isinstance(nelems, int):
        return None
    return nelems * size


def _bytes_from_shapes(args: dict[str, Any]) -> int | None:
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not dims or not types or not isinstance(dims[0], list) or not dims[0]:
        return None
    n = 1
    for d in dims[0]:
        n *= int(d)
    return _nbytes(n, types[0])


def _group_name(name: Any, desc: Any) -> str | None:
    """Same naming as the hook: the default group is "world", others "desc.name" or "name"."""
    if name is None:
        return None
    if desc == "default_pg":
        return "world"
    return f"{desc}.{name}" if desc and desc != "undefined" else str(name)


def parse(trace: dict[str, Any], *, rank: int | None = None, name: str = "<trace>"
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(steps, collectives) of one rank's trace."""
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        raise ParseError(f"{name}: no traceEvents list")
    dist = trace.get("distributedInfo") or {}
    if rank is None:
        rank = dist.get("rank")
    if not isinstance(rank, int):
        raise ParseError(f"{name}: the trace names no rank (no distributedInfo); give one")
    base = float(trace.get("baseTimeNanoseconds") or 0) / 1e9

    def wall(ts_us: float) -> float:
        return base + ts_us / 1e6

    steps: list[tuple[float, float, int]] = []
    launches: dict[Any, dict[str, Any]] = {}
    params: dict[Any, dict[str, Any]] = {}
    annotations: dict[tuple[Any, Any], list[tuple[float, float, str, dict[str, Any]]]] = {}
    kernels: list[dict[str, Any]] = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        ename, cat, args = str(e.get("name", "")), e.get("cat"), e.get("args") or {}
        ts, dur = float(e["ts"]), float(e.get("dur") or 0.0)
        if cat == "kernel":
            if _KERNEL.match(ename):
                kernels.append(e)
        elif cat in ("cuda_runtime", "cuda_driver"):
            if "correlation" in args:
                launches[args["correlation"]] = e
        elif ename == "record_param_comms":
            params[args.get("External id")] = args
        elif ename.startswith("nccl:") and cat in ("user_annotation", "cpu_op"):
            annotations.setdefault((e.get("pid"), e.get("tid")), []).append((ts, ts + dur, ename[5:], args))
        elif (m := _STEP.match(ename)) and cat in ("user_annotation", "cpu_op"):
            steps.append((ts, ts + dur, int(m.group(1))))
    steps.sort()
    for lst in annotations.values():
        lst.sort(key=lambda a: a[0])
    step_starts = [s[0] for s in steps]
    pg_sizes = {str(p.get("pg_name")): p.get("pg_size") for p in dist.get("pg_config") or []}

    def step_at(ts: float) -> int | None:
        i = bisect.bisect_right(step_starts, ts) - 1
        return steps[i][2] if i >= 0 and ts <= steps[i][1] else None

    def annotation_at(pid: Any, tid: Any, ts: float) -> tuple[str, dict[str, Any]] | None:
        best = None
        for a0, a1, op, args in annotations.get((pid, tid), ()):
            if a0 > ts:
                break
            if ts <= a1 and (best is None or a1 - a0 < best[1] - best[0]):
                best = (a0, a1, op, args)
        return (best[2], best[3]) if best else None

    out_colls: list[dict[str, Any]] = []
    seqs: dict[str | None, int] = {}
    for k in sorted(kernels, key=lambda e: float(e["ts"])):
        kargs = k.get("args") or {}
        launch = launches.get(kargs.get("correlation"))
        cpu_ts = float(launch["ts"]) if launch else float(k["ts"])
        ann = annotation_at(launch.get("pid"), launch.get("tid"), cpu_ts) if launch else None
        pargs = params.get(kargs.get("External id")) or {}
        info = kargs if "Collective name" in kargs else pargs
        kname = _KERNEL.match(str(k["name"]))
        raw_op = info.get("Collective name") or (ann[0] if ann else None) or (kname.group(1) if kname else "")
        op = OPS.get(str(raw_op), str(raw_op).lower())
        nbytes = _nbytes(info.get("In msg nelems"), info.get("dtype"))
        if nbytes is None and ann is not None:
            nbytes = _bytes_from_shapes(ann[1])
        group = _group_name(info.get("Process Group Name"), info.get("Process Group Description"))
        gsize = info.get("Group size") or pg_sizes.get(str(info.get("Process Group Name")))
        seqs[group] = seq = seqs.get(group, 0) + 1
        start = wall(float(k["ts"]))
        c: dict[str, Any] = {"rank": rank, "op": op, "seq": seq, "start": start,
                             "end": start + float(k.get("dur") or 0.0) / 1e6}
        step = step_at(cpu_ts)
        if step is not None:
            c["step"] = step
        if nbytes is not None:
            c["bytes"] = nbytes
        if group is not None:
            c["group"] = group
        if isinstance(gsize, int):
            c["group_size"] = gsize
        out_colls.append(c)

    out_steps = [{"rank": rank, "step": n, "start": wall(t0), "end": wall(t1)} for t0, t1, n in steps]
    return out_steps, out_colls
