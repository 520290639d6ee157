"""nccl-tests / rccl-tests importer on recorded real outputs (tests/fixtures/nccl-tests/, origins in
its SOURCES.md), and properties of the reader on cut and garbled copies of them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricscope.collectors.training.importers.nccl_tests import ParsedRun, parse
from fabricscope.core.errors import ParseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())

# Read by hand from each output.txt: the number of rows (two per table line), the first and the
# last row as (placement, size, time, busbw, #wrong), the file's own "# Avg bus bandwidth", ranks,
# nodes, library, the sum of #wrong, and some versions. Where a file prints no footer, no device
# line or no op, the value says so (None).
HAND: dict[str, dict[str, Any]] = {
    "nccl-h100-2node-16rank-a3mega": dict(
        rows=62, first=("out_of_place", 8, 135.8, 0.0, 0), last=("in_place", 8589934592, 47743.0, 337.35, 0),
        avg=70.742, ranks=16, nodes=2, library="nccl", wrong=0, op="all_reduce", versions={}),
    "nccl-a100-2node-16rank-oke-nccl2.25": dict(
        rows=6, first=("out_of_place", 1073741824, 10776.0, 186.83, 0),
        last=("in_place", 4294967296, 42364.0, 190.09, 0), avg=188.648, ranks=16, nodes=2, library="nccl",
        wrong=0, op="all_reduce", versions={"nccl": "2.25.1", "cuda": "12.8"}),
    "nccl-a100-2node-oke-nccl2.29-rankselided": dict(
        rows=8, first=("out_of_place", 1073741824, 10887.4, 184.92, 0),
        last=("in_place", 8589934592, 84992.3, 189.5, 0), avg=None, ranks=16, nodes=2, library="nccl", wrong=0,
        op="all_reduce", versions={"nccl_tests": "2.17.9", "nccl": "2.29.3", "cuda": "13.1"}),
    "nccl-a100-8gpu-sendrecv-tableonly": dict(
        rows=8, first=("out_of_place", 134217728, 1211.2, 110.81, 0),
        last=("in_place", 1073741824, 5490.5, 195.56, None), avg=None, ranks=8, nodes=None, library=None,
        wrong=0, op="sendrecv", versions={}),
    "nccl-gh200-2node-wrong-issue369": dict(
        rows=50, first=("out_of_place", 8, 17.49, 0.0, 0), last=("in_place", 134217728, 5886.67, 22.8, 0),
        avg=4.79995, ranks=2, nodes=2, library="nccl", wrong=96 + 32, op="all_reduce",
        versions={"nccl_tests": "2.17.8", "nccl": "2.29.2"}),
    "nccl-gh200-4node-16rank-wrong-int8": dict(
        rows=56, first=("out_of_place", 1, 24.41, 0.0, 0), last=("in_place", 134217728, 3023.61, 83.23, 0),
        avg=None, ranks=16, nodes=4, library="nccl", op="all_reduce",
        wrong=(18134 + 96817 + 763876 + 404221 + 951005 + 113492) + (9609 + 124342 + 530181 + 103664 + 820604),
        versions={"nccl_tests": "2.17.9", "nccl": "2.29.2"}),
    "nccl-rtx5090-1gpu-alltoall-issue287": dict(
        rows=2, first=("out_of_place", 33554432, 19.56, 0.0, 0), last=("in_place", 33554432, 0.78, 0.0, None),
        avg=0.0, ranks=1, nodes=1, library="nccl", wrong=0, op="alltoall", versions={}),
    "nccl-rtx5090-2gpu-debuginfo-failed-issue287": dict(
        rows=0, first=None, last=None, avg=None, ranks=2, nodes=1, library="nccl", wrong=None, op="all_reduce",
        versions={"nccl": "2.25.1", "cuda": "12.8"}),
    "rccl-mi300x-1node-8rank": dict(
        rows=62, first=("out_of_place", 8, 19.28, 0.0, 0), last=("in_place", 8589934592, 47584.0, 315.91, 0),
        avg=110.464, ranks=8, nodes=1, library="rccl", wrong=0, op="all_reduce",
        versions={"rccl_tests": "develop:a7809b3"}),
    "rccl-mi300x-2node-16rank": dict(
        rows=64, first=("out_of_place", 8, 256.5, 0.0, 0), last=("in_place", 17179869184, 90127.0, 357.41, 0),
        avg=92.3318, ranks=16, nodes=2, library="rccl", wrong=0, op="all_reduce",
        versions={"rccl": "2.22.3", "rccl_tests": "develop:448c4c7"}),
    "rccl-mi355x-2node-16rank-noheader": dict(
        rows=62, first=("out_of_place", 8, 41.16, 0.0, 0), last=("in_place", 8589934592, 43639.0, 369.08, 0),
        avg=None, ranks=16, nodes=2, library="rccl", wrong=0, op=None, versions={"rccl": "2.26.6"}),
    **{f"superbench-a100-8gpu-c0-{op}": dict(
        rows=68, first=("out_of_place", 0, first, 0.0, None), last=("in_place", 8589934592, t, busbw, None),
        avg=avg, ranks=8, nodes=1, library="nccl", wrong=None, op=op, versions={})
       for op, first, t, busbw, avg in [("all_reduce", 35.2, 63959.0, 235.03, 68.4048),
                                        ("all_gather", 34.27, 32669.0, 230.07, 58.2651),
                                        ("alltoall", 1.63, 33234.0, 226.16, 58.6481),
                                        ("broadcast", 34.61, 36599.0, 234.7, 64.8653),
                                        ("reduce", 36.9, 37539.0, 228.83, 65.018),
                                        ("reduce_scatter", 34.88, 32502.0, 231.25, 60.168)]},
}
_AVG_LINE = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)", re.M)


def _approx(got: Any, want: Any) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (got, want)
        for k in want:
            _approx(got[k], want[k])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want, strict=True):
            _approx(g, w)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=0, abs=1e-9)
    else:
        assert got == want


@cache
def case(name: str) -> tuple[str, str, list[ParsedRun]]:
    expected = json.loads((FIXTURES / name / "expected.json").read_text())
    return (FIXTURES / name / "output.txt").read_text(), expected["source"], expected["runs"]


def test_every_case_is_hand_checked() -> None:
    assert sorted(HAND) == CASES


@pytest.mark.parametrize("name", CASES)
def test_recorded_output_parses_as_reviewed(name: str) -> None:
    text, source, expected = case(name)
    runs = parse(text, source=source)
    _approx(runs, expected)
    (run,) = runs
    hand = HAND[name]
    rows = run["rows"]
    assert len(rows) == hand["rows"]
    pick = ("placement", "size_bytes", "time_us", "busbw_gbps", "wrong")
    assert (tuple(rows[0][k] for k in pick) if rows else None) == hand["first"]  # type: ignore[literal-required]
    assert (tuple(rows[-1][k] for k in pick) if rows else None) == hand["last"]  # type: ignore[literal-required]
    for k in ("ranks", "nodes", "library", "op"):
        assert run[k] == hand[k], k  # type: ignore[literal-required]
    assert run["wrong_total"] == hand["wrong"]
    assert hand["versions"].items() <= run["versions"].items()
    own = _AVG_LINE.findall(text)  # the file's own average, where it prints one
    assert run["avg_busbw_gbps"] == (float(own[0]) if own else None) == hand["avg"]
    # Two placements per table line, out-of-place first, same size and type.
    assert [r["placement"] for r in rows] == ["out_of_place", "in_place"] * (len(rows) // 2)
    assert all(a["size_bytes"] == b["size_bytes"] for a, b in zip(rows[::2], rows[1::2], strict=True))
    if run["devices"] and not any("device lines list" in p for p in run["problems"]):
        assert len(run["devices"]) == run["ranks"]  # one device line per rank: how a bad node is found
    assert run["source"] == source


def test_device_lines_are_kept_per_rank() -> None:
    run = parse(case("rccl-mi300x-2node-16rank")[0])[0]
    d = run["devices"][9]
    assert d == {"rank": 9, "group": None, "pid": 366642, "host": "gpu-56", "device": 1, "bus_id": "0000:25:00.0",
                 "name": "AMD Instinct MI300X"}
    assert [d["name"] for d in parse(case("rccl-mi355x-2node-16rank-noheader")[0])[0]["devices"]] == [None] * 16


def test_elided_device_lines_give_the_rank_count_and_say_so() -> None:
    run = parse(case("nccl-a100-2node-oke-nccl2.29-rankselided")[0])[0]
    assert [d["rank"] for d in run["devices"]] == [0, 7, 8, 15] and run["ranks"] == 16
    assert any("device lines list 4 of ranks 0..15" in p for p in run["problems"])


def test_failed_run_keeps_its_failure_lines() -> None:
    run = parse(case("nccl-rtx5090-2gpu-debuginfo-failed-issue287")[0])[0]
    assert run["rows"] == [] and "no result rows" in run["problems"]
    assert "line 72: GENOA-06: Test NCCL failure common.cu:392 'unhandled cuda error (run with NCCL_DEBUG=INFO for " \
           "details) / '" in run["problems"]


def test_several_runs_in_one_log_and_the_op_hint() -> None:
    a3 = case("nccl-h100-2node-16rank-a3mega")[0]
    rccl = case("rccl-mi300x-2node-16rank")[0]
    runs = parse(a3 + "\n" + rccl, source="sweep.log")
    assert [(r["op"], r["library"], len(r["rows"]), r["ranks"]) for r in runs] == [
        ("all_reduce", "nccl", 62, 16), ("all_reduce", "rccl", 64, 16)]
    mi355 = case("rccl-mi355x-2node-16rank-noheader")[0]
    assert parse(mi355, op="all_reduce")[0]["op"] == "all_reduce"  # the output names no binary
    assert parse(mi355, source="all_gather_perf.out")[0]["op"] == "all_gather"
    assert parse(a3, op="broadcast")[0]["op"] == "all_reduce"  # the output's own binary wins
    with pytest.raises(ValueError, match="op must be one of"):
        parse(a3, op="allreduce")


def test_a_table_full_of_foreign_lines_lists_a_bounded_number_of_problems() -> None:
    text = case("rccl-mi300x-1node-8rank")[0]
    at = text.index("          16             4")
    run = parse(text[:at] + "garbage from another program\n" * 500 + text[at:])[0]
    assert len(run["rows"]) == 62
    assert len(run["problems"]) == 100 and run["problems"][-1] == "... and 401 more lines not read"
    assert run["problems"][0] == ("line 20: not a result row (4 columns, the header has 13): "
                                  "garbage from another program")


def test_nothing_recognisable_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="no nccl-tests output found"):
        parse("mpirun: command not found\n", source="x.log")
    with pytest.raises(ParseError, match="not nccl-tests JSON"):
        parse("{\"version\": ", source="x.json")


# --- properties on cut and garbled copies ----------------------------------------------------

JUNK = "@%&!?~|^$"  # none of these can be part of a number, a name, "N/A", a '#' comment or a line break


def _rows(runs: list[ParsedRun]) -> list[dict[str, Any]]:
    return [dict(r) for run in runs for r in run["rows"]]


def _is_subsequence(part: list[Any], whole: list[Any]) -> bool:
    it = iter(whole)
    return all(any(x == y for y in it) for x in part)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(CASES), cut=st.floats(0, 1))
def test_cut_output_gives_a_prefix_of_the_rows(name: str, cut: float) -> None:
    text, source, _ = case(name)
    full = _rows(parse(text, source=source))
    try:
        runs = parse(text[:int(len(text) * cut)], source=source)
    except ParseError:
        return
    got = _rows(runs)
    assert got == full[:len(got)]
    if len(got) < len(full):
        assert any(run["problems"] for run in runs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(CASES), data=st.data())
def test_garbled_output_keeps_only_true_rows_and_says_what_it_dropped(name: str, data: st.DataObject) -> None:
    """Lines deleted, junk lines inserted, spans of a line overwritten with junk, lines chopped
    between columns. A row lost to a deleted line leaves no trace to report; any other loss does."""
    text, source, _ = case(name)
    full = _rows(parse(text, source=source))
    lines = text.split("\n")
    deleted = False
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["delete", "insert", "smear", "chop"]))
        spaces = [i for i, c in enumerate(lines[at]) if c == " " and lines[at][:i].strip()]
        if action == "delete":
            del lines[at]
            deleted = True
        elif action == "insert":
            lines.insert(at, data.draw(st.text(JUNK + " ", min_size=1, max_size=40)))
        elif action == "chop":  # another process's output broke the line between two columns
            if spaces:
                lines[at] = lines[at][:data.draw(st.sampled_from(spaces))]
        elif lines[at]:
            a = data.draw(st.integers(0, len(lines[at]) - 1))
            b = data.draw(st.integers(a + 1, len(lines[at])))
            lines[at] = lines[at][:a] + data.draw(st.text(JUNK, min_size=b - a, max_size=b - a)) + lines[at][b:]
    try:
        runs = parse("\n".join(lines), source=source)
    except ParseError:
        return
    got = _rows(runs)
    assert _is_subsequence(got, full)
    if len(got) < len(full) and not deleted:
        assert any(run["problems"] for run in runs)


# --- formats with no public recording: built from nccl-tests' own writer (src/util.cu @ a0b82b2) ---
# These are DERIVED FROM THE SOURCE CODE, not recordings: no nccl-tests -J report, -S timestamp
# column or -I per-iteration column was found in any public repository or issue.

def _derived_json(**over: Any) -> str:
    """A -J report as util.cu writes it (jsonOutputInit, writeDeviceReport, writeBenchmarkLine*,
    writeResultFooter, writeErrors, jsonOutputFinalize): 2 MPI processes with -g 2, two sizes."""
    def perf(t: float, alg: float, bus: float, nwrong: str) -> str:
        return f'{{"time":{t:f},"alg_bw":{alg:f},"bus_bw":{bus:f},"nwrong":{nwrong}}}'
    dev = ('{{"rank":{r},"group":0,"pid":{p},"hostname":"{h}","device":0,"device_hex":"0000:1b:00",'
           '"device_info":"NVIDIA H100 80GB HBM3"}}')
    results = [
        f'{{"size":8,"count":2,"type":"float","redop":"sum","root":"    -1","out_of_place":'
        f'{perf(30.5, 0.000262, 0.000393, over.get("nwrong", "0.000000"))},"in_place":'
        f'{perf(29.75, 0.000269, 0.000403, over.get("nwrong", "0.000000"))},'
        '"actual_iterations":20,"experiment_name":""}',
        f'{{"size":16,"count":4,"type":"float","redop":"sum","root":"    -1","out_of_place":'
        f'{perf(30.25, 0.000529, 0.000793, over.get("nwrong", "0.000000"))},"in_place":'
        f'{perf(30.0, 0.000533, 0.0008, over.get("nwrong2", "0.000000"))},'
        '"actual_iterations":20,"experiment_name":""}',
    ]
    avg_key, bw_key = over.get("avg_keys", ("average_bus_bandwidth", "bandwidth"))
    return (
        '{"version":3,"start_time":"2025-11-02 10:00:00","args":["./build/all_reduce_perf","-b","8","-e","16",'
        '"-g","2","-J","run.json"],"env":["PATH=/usr/bin"],"nccl_version":22803,"config":{"nthreads":1,"ngpus":2,'
        '"minimum_bytes":8,"maximum_bytes":16,"step_factor":2,"warmup_iters":1,"iterations":20,'
        f'"aggregated_iterations":1,"validation":{over.get("validation", 1)},"graph":0,'
        '"blocking_collectives":"false","per_iter_timing":"false","per_iter_skip":0,"parallel_init":"false",'
        f'"devices":[{dev.format(r=0, p=4100, h="node-a")},{dev.format(r=2, p=5200, h="node-b")}]}},'
        f'"results":[{",".join(results)}],"out_of_bounds":{{"count":0,"okay":"true"}},'
        f'"{avg_key}":{{"{bw_key}":0.000597,"okay":"unchecked"}},"errors":[],"end_time":"2025-11-02 10:00:03"}}')


def test_json_report_derived_from_source() -> None:
    from zoneinfo import ZoneInfo

    oslo = ZoneInfo("Europe/Oslo")
    (run,) = parse(_derived_json(), source="run.json", tz=oslo)
    assert (run["op"], run["ranks"], run["nodes"], run["threads"], run["gpus_per_thread"]) == ("all_reduce", 4, 2, 1, 2)
    assert run["command"] == "all_reduce_perf -b 8 -e 16 -g 2 -J run.json" and run["versions"] == {"nccl": "2.28.3"}
    assert run["started_at"] == datetime(2025, 11, 2, 10, 0, 0, tzinfo=oslo).timestamp()
    assert [(r["size_bytes"], r["placement"], r["root"], r["wrong"]) for r in run["rows"]] == [
        (8, "out_of_place", -1, 0), (8, "in_place", -1, 0), (16, "out_of_place", -1, 0), (16, "in_place", -1, 0)]
    assert run["rows"][0]["busbw_gbps"] == 0.000393 and run["avg_busbw_gbps"] == 0.000597
    assert run["wrong_total"] == 0 and run["problems"] == [] and run["library"] == "nccl"
    assert [d["host"] for d in run["devices"]] == ["node-a", "node-b"]  # one entry per process
    assert parse("\ufeff" + _derived_json(), tz=oslo) == [run | {"source": "<input>"}]  # a BOM is not text output


def test_json_report_variants_derived_from_source() -> None:
    unchecked = parse(_derived_json(nwrong="null", nwrong2="null", validation=0))[0]
    assert [r["wrong"] for r in unchecked["rows"]] == [None] * 4 and unchecked["wrong_total"] is None
    typo = parse(_derived_json(avg_keys=("average_bus_bandwidith", "bandwidith")))[0]  # before 2.17.9
    assert typo["avg_busbw_gbps"] == 0.000597
    bad = parse(_derived_json(nwrong2='"nan"'))[0]
    assert len(bad["rows"]) == 2 and any(p.startswith("results[1]: ValueError") for p in bad["problems"])
    text = _derived_json()
    died = parse(text[:text.index('{"size":16')], source="run.json")[0]  # the run died after one size
    assert [r["size_bytes"] for r in died["rows"]] == [8, 8] and died["ranks"] == 4
    assert died["problems"][0].startswith("JSON ends early")


def test_timestamp_and_per_iteration_columns_derived_from_source() -> None:
    # The lines are built with util.cu's own printf formats, hence the % formatting.
    head = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n"  # writeResultHeader
    cols = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
            "#wrong", 19, "timestamp")
    row = "%12li  %12li  %8s  %6s  %6s" % (1048576, 262144, "float", "sum", "-1")  # noqa: UP031 - Preamble
    body = "  %7s  %6s  %6s  %6g"  # writeBenchmarkLineBody
    stamped = (head % cols + row + body % ("85.58", "12.25", "22.97", 0) + body % ("84.50", "12.41", "23.27", 0)
               + "%21s" % "2025-11-02 10:00:07" + "\n")  # noqa: UP031 - writeTimestamp
    run = parse("# nThread 1 nGpus 1\n" + stamped, source="all_reduce_perf.log")[0]
    assert [(r["placement"], r["busbw_gbps"]) for r in run["rows"]] == [("out_of_place", 22.97), ("in_place", 23.27)]
    assert run["started_at"] == datetime(2025, 11, 2, 10, 0, 7, tzinfo=UTC).timestamp()
    iter_head = ("# %10s  %12s  %8s  %6s  %6s  " + "%7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  " * 2 + "\n") % (
        "size", "count", "type", "redop", "root", *(["time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
                                                      "i_cv%"] * 2))
    per_iter = "  %7s  %7s  %7s  %7s" % ("80.10", "95.00", "94.20", "3.10")  # noqa: UP031 - writePerIterReport
    line = row + body % ("85.58", "12.25", "22.97", 0) + per_iter + body % ("84.50", "12.41", "23.27", 2) + per_iter
    run = parse("# nThread 1 nGpus 1\n" + iter_head + line + "\n", source="all_reduce_perf.log")[0]
    assert [(r["time_us"], r["wrong"]) for r in run["rows"]] == [(85.58, 0), (84.5, 2)] and run["wrong_total"] == 2


def test_srun_labels_are_stripped() -> None:
    # ROCm/rccl issue #1490 (4 nodes x 4 MI250X, srun --label): the table as pasted, its first rows.
    text = """\
 0: #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
 0: #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
 0:        65536           512     float    none      -1    107.5    0.61    0.59      0    105.6    0.62    0.60      0
 0:       131072          1024     float    none      -1    210.0    0.62    0.60      0    202.6    0.65    0.63      0
"""
    run = parse(text, source="all_gather_perf.out")[0]
    assert [(r["size_bytes"], r["busbw_gbps"]) for r in run["rows"]] == [
        (65536, 0.59), (65536, 0.6), (131072, 0.6), (131072, 0.63)]
    assert run["op"] == "all_gather"
