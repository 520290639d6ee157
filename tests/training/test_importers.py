"""Importers on real recorded outputs: NCCL Inspector JSON and PyTorch profiler (Kineto) traces."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fabricscope.collectors.training.importers import kineto, nccl_inspector
from fabricscope.core.errors import ParseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def parse_case(case: str) -> dict[str, Any]:
    d = FIXTURES / case
    if case.startswith("nccl-inspector"):
        colls, hosts = nccl_inspector.parse((d / "input.json").read_text(), case)
        return {"collectives": colls, "hosts": {str(k): v for k, v in hosts.items()}}
    steps, colls = kineto.parse(kineto.load(d / "input.json.gz"), name=case)
    return {"steps": steps, "collectives": colls}


@pytest.mark.parametrize("case", CASES)
def test_fixture_case_matches_expected(case: str) -> None:
    expected = json.loads((FIXTURES / case / "expected.json").read_text())
    assert _approx_equal(parse_case(case), expected)


def _approx_equal(got: Any, want: Any) -> bool:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (got, want)
        return all(_approx_equal(got[k], want[k]) for k in want)
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        return all(_approx_equal(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, float):
        assert got == pytest.approx(want, rel=0, abs=1e-6)
        return True
    assert got == want
    return True


def test_inspector_records_read_as_documented() -> None:
    colls, hosts = nccl_inspector.parse((FIXTURES / "nccl-inspector-two-records" / "input.json").read_text())
    ar, rs = colls
    assert (ar["rank"], ar["op"], ar["seq"], ar["bytes"], ar["group"], ar["group_size"]) == (
        2, "all_reduce", 1407, 17179869184, "0x7f8c496ae9f661", 8)
    assert ar["end"] - ar["start"] == pytest.approx(0.061974, abs=1e-6)  # coll_exec_time_us
    assert ar["end"] == pytest.approx(1748030377.748202)  # non-verbose: the dump time
    assert (rs["op"], rs["seq"], rs["bytes"], rs["rank"]) == ("reduce_scatter", 1231, 2147483648, 4)
    assert rs["end"] == pytest.approx(1752867229.275811)  # verbose: the last kernel stop
    assert rs["end"] - rs["start"] == pytest.approx(0.041057, abs=1e-6)
    assert hosts == {2: "example-hostname", 4: "example-hostname"}


def test_inspector_bad_record_is_skipped_and_bad_file_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    good = (FIXTURES / "nccl-inspector-allreduce" / "input.json").read_text()
    broken = json.loads(good)
    del broken["coll_perf"]["coll_exec_time_us"]
    colls, _ = nccl_inspector.parse(json.dumps(broken) + "\n" + good, "mixed.log")
    assert len(colls) == 1 and colls[0]["seq"] == 1407
    assert "mixed.log: record 0 skipped" in caplog.text
    with pytest.raises(ParseError, match="trunc.log: not JSON"):
        nccl_inspector.parse(good[:-20], "trunc.log")


def test_kineto_nccl_trace_counts_durations_and_bytes() -> None:
    steps, colls = parse_case("kineto-hta-nccl-data").values()
    # ProfilerStep#4..6, durations from the annotations' dur (microseconds).
    assert [s["step"] for s in steps] == [4, 5, 6]
    assert [round(s["end"] - s["start"], 6) for s in steps] == [0.222442, 0.219727, 0.224936]
    assert steps[0]["start"] == pytest.approx(1711964646 + 4458676.416788066)  # baseTimeNanoseconds + ts
    assert Counter(c["op"] for c in colls) == {"all_reduce": 15, "broadcast": 6}
    assert Counter(c["step"] for c in colls) == {4: 7, 5: 7, 6: 7}
    first = colls[0]  # ncclKernel_Broadcast, 53120 Float elements, dur 30.975 us
    assert (first["op"], first["bytes"], first["group"], first["group_size"]) == ("broadcast", 212480, "world", 2)
    assert first["end"] - first["start"] == pytest.approx(30.975e-6, abs=1e-6)
    assert colls[1]["bytes"] == 53 * 8  # a Long broadcast
    assert [c["seq"] for c in colls] == list(range(1, 22))
    assert all(c["rank"] == 0 for c in steps + colls)


def test_kineto_sampled_traces_take_op_and_size_from_the_enclosing_annotation() -> None:
    for case, rank in (("kineto-hta-sampled-rank0", 0), ("kineto-hta-sampled-rank1", 1)):
        steps, colls = parse_case(case).values()
        assert [s["step"] for s in steps] == [551, 552]
        assert Counter(c["op"] for c in colls) == {"all_to_all": 4, "all_reduce": 4, "all_gather_into_tensor": 2}
        assert all(c["rank"] == rank for c in colls)
    _, colls = parse_case("kineto-hta-sampled-rank0").values()
    by_start = {round(c["start"], 6): c for c in colls}
    ar = by_start[1682725898.295662]  # launched inside nccl:all_reduce of 19618307 floats
    assert ar["op"] == "all_reduce" and ar["bytes"] == 19618307 * 4 and ar["step"] == 551
    assert ar["end"] - ar["start"] == pytest.approx(0.011727, abs=1e-6)


def test_kineto_without_rank_needs_one(tmp_path: Path) -> None:
    trace = kineto.load(FIXTURES / "kineto-hta-nccl-data" / "input.json.gz")
    del trace["distributedInfo"]
    with pytest.raises(ParseError, match="names no rank"):
        kineto.parse(trace)
    steps, _ = kineto.parse(trace, rank=5)
    assert {s["rank"] for s in steps} == {5}
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": 3}'))
    with pytest.raises(ParseError, match="no traceEvents"):
        kineto.load(bad)
