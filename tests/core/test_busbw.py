"""fabricscope.core.busbw against nccl-tests' own definitions and printed numbers.

PERFORMANCE.md (NVIDIA/nccl-tests@03a204a1f38aaea17f1a777885bb2d9600ba7eff, doc/PERFORMANCE.md),
"Summary": AllReduce 2*(n-1)/n; ReduceScatter, AllGather, AlltoAll (n-1)/n; Broadcast, Reduce 1.
src/sendrecv.cu: factor 1; src/gather.cu and src/scatter.cu: (n-1)/n over count*nranks*typesize.
"""

from __future__ import annotations

import pytest

from fabricscope.collectors.training.collectives import SPECS
from fabricscope.core.busbw import (
    BUS_FACTOR,
    FACTOR_FORM,
    HOOK_OPS,
    busbw_gbps,
    canonical_op,
    nccl_size,
    size_bucket,
)

SPEC_OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv",
            "gather", "scatter", "hypercube")


@pytest.mark.parametrize("n", [1, 2, 3, 8, 16, 1024])
def test_factors_are_performance_md_formulas(n: int) -> None:
    assert BUS_FACTOR["all_reduce"](n) == pytest.approx(2 * (n - 1) / n)
    for op in ("reduce_scatter", "all_gather", "alltoall", "gather", "scatter"):
        assert BUS_FACTOR[op](n) == pytest.approx((n - 1) / n), op
    for op in ("broadcast", "reduce", "sendrecv"):
        assert BUS_FACTOR[op](n) == 1.0, op


def test_every_canonical_op_has_a_factor() -> None:
    assert set(SPEC_OPS) == set(FACTOR_FORM) == set(BUS_FACTOR)


def test_recorded_all_reduce_row_reproduces() -> None:
    # lessizzmore/create-a3mega-ztan-fork@02dd8f455c43 ztan-NCCL-test-result: all_reduce_perf on 16
    # H100 ranks, last out-of-place row: size 8589934592 B, 47535 us, algbw 180.71, busbw 338.82.
    bw = busbw_gbps("all_reduce", 8589934592, 47535e-6, 16)
    assert bw == pytest.approx(338.82, abs=0.01)


def test_recorded_sendrecv_row_reproduces() -> None:
    # li-plus/playground cuda/nccl.md: sendrecv_perf -g 8, 1073741824 B, 5503.4 us, busbw 195.10.
    assert busbw_gbps("sendrecv", 1073741824, 5503.4e-6, 8) == pytest.approx(195.10, abs=0.01)


def test_hook_input_bytes_to_nccl_size() -> None:
    # The hook records this rank's input: all_gather's nccl-tests size is the gathered output.
    assert nccl_size("all_gather", 1000, 8) == 8000
    assert nccl_size("all_gather_into_tensor", 1000, 8) == 8000
    # reduce_scatter's input list is already the total array; the others are input-sized.
    for op in ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single", "broadcast",
               "send", "recv"):
        assert nccl_size(op, 1000, 8) == 1000, op


def test_every_hook_op_but_barrier_maps() -> None:
    posted = {op for op, _params in SPECS.values()}
    assert {op for op in posted if canonical_op(op) is None} == {"barrier"}
    assert set(HOOK_OPS.values()) <= set(FACTOR_FORM)
    assert canonical_op("all_to_all") == "alltoall" and canonical_op("send") == "sendrecv"


def test_unknown_op_and_bad_values() -> None:
    with pytest.raises(KeyError):
        busbw_gbps("barrier", 8, 1.0, 2)
    with pytest.raises(KeyError):
        nccl_size("nope", 8, 2)
    with pytest.raises(ValueError):
        busbw_gbps("all_reduce", 8, 0.0, 2)
    with pytest.raises(ValueError):
        BUS_FACTOR["all_reduce"](0)


@pytest.mark.parametrize(("size", "bucket"), [(0, 1), (1, 1), (2, 2), (3, 2), (1023, 512), (1024, 1024),
                                              (8589934592, 8589934592), (8589934593, 8589934592)])
def test_size_bucket(size: int, bucket: int) -> None:
    assert size_bucket(size) == bucket
