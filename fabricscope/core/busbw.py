"""Bus bandwidth as nccl-tests defines it, so the hook's collectives compare with acceptance runs.

nccl-tests (doc/PERFORMANCE.md, NVIDIA/nccl-tests@03a204a) reports, for a collective of size S
bytes that took t seconds on n ranks::

    algbw = S / t
    busbw = algbw * factor(n)
        AllReduce                         2*(n-1)/n
        ReduceScatter, AllGather, AlltoAll  (n-1)/n
        Broadcast, Reduce                 1

and the sources add: SendRecv 1 (src/sendrecv.cu), Gather and Scatter (n-1)/n over the total
array (src/gather.cu, src/scatter.cu: ``baseBw = count*nranks*typesize/sec``,
``factor = (n-1)/n``), HyperCube ``count*typesize*(n-1)/sec`` with factor 1, which over the total
array ``count*n*typesize`` is (n-1)/n as well. "GB/s" is 1e9 bytes per second there and here.

S is "the size in bytes of the total array" (PERFORMANCE.md, ReduceScatter/AllGather): for
AllGather that is ``sendcount*sizeof(type)*n``, the OUTPUT; for the others the input buffer.
The hook records each rank's INPUT bytes (collectors/training/collectives.py ``SPECS``: the
``tensor``/``input_tensor``/``input_list``/``input`` parameters), so only all-gather needs
``S = hook_bytes * n``; reduce-scatter's input list already is the total array.

Standard library only: the hook, the importers and the server all use it.
"""

from __future__ import annotations

from collections.abc import Callable

# Each factor as ``k*(n-m)/n``: one data form that the server also turns into SQL (``FACTOR_FORM``)
# and that ``BUS_FACTOR`` evaluates in Python, so the two can never disagree.
FACTOR_FORM: dict[str, tuple[int, int]] = {
    "all_reduce": (2, 1),
    "reduce_scatter": (1, 1),
    "all_gather": (1, 1),
    "alltoall": (1, 1),
    "gather": (1, 1),
    "scatter": (1, 1),
    "hypercube": (1, 1),
    "broadcast": (1, 0),
    "reduce": (1, 0),
    "sendrecv": (1, 0),
}


def _factor(k: int, m: int) -> Callable[[int], float]:
    def factor(n: int) -> float:
        if n < 1:
            raise ValueError(f"group size must be >= 1, got {n}")
        return k * (n - m) / n

    return factor


BUS_FACTOR: dict[str, Callable[[int], float]] = {op: _factor(k, m) for op, (k, m) in FACTOR_FORM.items()}

# Ops whose nccl-tests size is the output (n times this rank's input), see the module docstring.
OUTPUT_SIZED: frozenset[str] = frozenset({"all_gather"})

# What the hook posts (torch.distributed's names, collectives.py SPECS) -> the nccl-tests op.
# The hook's spellings stay as they are in the database; this table is read where they are compared.
# barrier moves no payload and has no bus bandwidth, so it is not here.
HOOK_OPS: dict[str, str] = {
    **{op: op for op in FACTOR_FORM},
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all": "alltoall",
    "all_to_all_single": "alltoall",
    "send": "sendrecv",
    "recv": "sendrecv",
}


def canonical_op(op: str) -> str | None:
    """The nccl-tests op a hook (or nccl-tests binary minus ``_perf``) op name is, None if none."""
    return HOOK_OPS.get(op)


def nccl_size(op: str, hook_bytes: int, n: int) -> int:
    """The nccl-tests "size" of a collective whose hook-recorded bytes are this rank's input."""
    canon = canonical_op(op)
    if canon is None:
        raise KeyError(f"no bus bandwidth definition for op {op!r}")
    return hook_bytes * n if canon in OUTPUT_SIZED else hook_bytes


def busbw_gbps(op: str, size_bytes: int, seconds: float, n: int) -> float:
    """nccl-tests busbw in GB/s (1e9) of an op of nccl-tests size ``size_bytes`` on ``n`` ranks."""
    canon = canonical_op(op)
    if canon is None:
        raise KeyError(f"no bus bandwidth definition for op {op!r}")
    if seconds <= 0:
        raise ValueError(f"duration must be > 0, got {seconds}")
    return size_bytes / seconds / 1e9 * BUS_FACTOR[canon](n)


def size_bucket(size_bytes: int) -> int:
    """The largest power of two <= size (1 for 0 and 1): runs and jobs are compared per bucket."""
    if size_bytes < 0:
        raise ValueError(f"size must be >= 0, got {size_bytes}")
    return 1 << max(size_bytes.bit_length() - 1, 0)


# The collective's own time, as SQL over a `collectives` row `c`: the shortest record of its (group,
# seq, op, step), which is the last rank's to arrive, from its arrival to the completion (a record
# without seq keeps its own duration). The busbw of the efficiency endpoint, the busbw alert and the
# hourly rollup all use it, so they agree (service/acceptance/efficiency.py's module doc says why).
OWN_TIME_SQL = ("CASE WHEN c.seq IS NULL THEN c.duration_s "
                "ELSE min(c.duration_s) OVER (PARTITION BY c.group_name, c.seq, c.op, c.step) END")
