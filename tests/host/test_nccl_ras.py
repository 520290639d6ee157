"""NCCL RAS status reports (collectors/host/nccl_ras*.py) on every recorded report of
tests/fixtures/nccl-ras (origins in its SOURCES.md): the event attributes and the problems as
reviewed in expected.json, the facts checked by hand, the format sniffed by ``fabricscope parse``,
and malformed input named in problems, never read as a healthy report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabricscope.collectors.formats import load
from fabricscope.collectors.host.nccl_ras import parse

ROOT = Path(__file__).resolve().parents[1] / "fixtures/nccl-ras"
CASES = sorted(p.name for p in ROOT.iterdir() if p.is_dir())


def _output(case: str) -> Path:
    (path,) = (ROOT / case).glob("output.*")
    return path


@pytest.mark.parametrize("case", CASES)
def test_fixture_reads_as_reviewed(case: str) -> None:
    report = parse(_output(case).read_text())
    want = json.loads((ROOT / case / "expected.json").read_text())
    assert report.to_attrs() == want["attrs"]
    assert report.problems == want["problems"]


@pytest.mark.parametrize("case", CASES)
def test_parse_command_sniffs_every_fixture_as_nccl_ras(case: str) -> None:
    fmt = load().sniff(_output(case))
    assert fmt is not None and fmt.name == "nccl-ras"
    reading = fmt.read(_output(case), "node07:nccl-ras", 1.0)
    assert [e.kind for e in reading.events] == ["nccl_ras"]


# case -> {(comm hash, rank): state} as read by hand from the report
HAND: dict[str, dict[tuple[str, int], str]] = {
    "docs-2.24-running-ok": {},
    "issue1730-2.26-healthy-256gpu": {},
    "issue1911-2.26-mismatch-allgather": {},  # the two listed ranks are ahead; the 30 behind are not named
    "docs-2.24-mismatch-opcounts": {("27a079b828ff1a75", r): "behind" for r in (0, 2, 3, 4, 5, 7)},
    "docs-2.24-incomplete-timeout": {("cf264af53edbe986", 21): "missing"},
    "docs-2.24-dead": {("cf264af53edbe986", 21): "missing"},
    "issue1762-2.27-incomplete-nocomm": {("b3398875b8b2a063", 1): "unresponsive"},
    "docs-2.29-json-unresponsive": {("ae94423cfbb2ef4a", 1): "unresponsive"},
    "docs-2.24-finalize-mismatch": {("9e17999afaa87dbb", r): "status" for r in (0, 8, 16, 24, 4, 20)},
}


@pytest.mark.parametrize("case", CASES)
def test_hand_checked_rank_states(case: str) -> None:
    report = parse(_output(case).read_text())
    assert {(r.comm, r.rank): r.state for r in report.ranks} == HAND[case]


def test_hand_checked_job_and_processes() -> None:
    ok = parse(_output("issue1730-2.26-healthy-256gpu").read_text())
    assert (ok.nccl_version, ok.nodes, ok.processes, ok.gpus, ok.troubled) == ("2.26.2", 32, 256, 256, False)
    odd = parse(_output("issue1762-2.27-incomplete-nocomm").read_text())
    assert (odd.nodes, odd.processes, odd.gpus) == (2, 10, 10)
    assert [g["status"] for g in odd.groups] == ["RUNNING", "RUNNING", "NOCOMM"]
    assert odd.groups[2]["errors"] == ["INCOMPLETE", "MISMATCH"]
    dead = parse(_output("docs-2.24-dead").read_text())
    assert [(p.pid, p.host, p.gpus) for p in dead.dead_processes] == [(3487984, "172.16.64.213", "5")]
    slow = parse(_output("issue1911-2.26-mismatch-allgather").read_text())
    assert slow.comms[0].op_counts == [{"op": "AllGather", "count": 640, "ranks": 30},
                                       {"op": "AllGather", "count": 641, "ranks": 2}]
    timeout = parse(_output("docs-2.24-incomplete-timeout").read_text())
    assert (timeout.timeouts, timeout.collection_s, timeout.comms[0].ranks_seen) == (2, 2.05, 31)


def test_json_hash_matches_the_text_spelling_and_unknown_process_is_absent() -> None:
    doc = json.loads(_output("docs-2.29-json-unresponsive").read_text())
    doc["communicators"][0]["hash"] = "0x27a079b828ff1a7"  # 15 digits: %lx drops the leading zero
    doc["communicators"][0]["missing_ranks"][0].update(host="unknown", pid=-1)
    doc["communicators"][0]["missing_ranks"][0]["status"] = {"unresponsive": True, "considered_dead": True}
    report = parse(json.dumps(doc))
    (st,) = report.ranks
    assert (st.comm, st.state, st.host, st.pid) == ("027a079b828ff1a7", "dead", None, None)


def test_json_rank_errors_and_counts_behind() -> None:
    doc = json.loads(_output("docs-2.29-json-unresponsive").read_text())
    rank0 = doc["communicators"][0]["ranks"][0]
    rank1 = {**rank0, "rank": 1, "pid": 1524345, "status": {**rank0["status"], "async_error": 6},
             "collective_counts": {**rank0["collective_counts"], "AllReduce": 9}}
    rank0["collective_counts"]["AllReduce"] = 10
    doc["communicators"][0]["ranks"].append(rank1)
    doc["communicators"][0]["missing_ranks"] = []
    got = {(r.rank, r.state, r.detail, r.op, r.count) for r in parse(json.dumps(doc)).ranks}
    assert got == {(1, "async_error", "Remote process error", None, None), (1, "behind", None, "AllReduce", 9)}


@pytest.mark.parametrize("text, problem", [
    ("", "no NCCL RAS report"),
    ("<html>502 Bad Gateway</html>\n", "not read: '<html>502 Bad Gateway</html>'"),
    ("ERROR: Unknown command set format json\n", "the RAS server said"),
    ('{"communicators": [{"hash": "0x1", "ranks": [', "not JSON"),
    ('{"nccl_version": "2.29.1"}', "no communicators list"),
    ("Errors\n======\n\n  Rank 3 -- GPU 0 managed by process 1 on node 10.0.0.1\n", "outside a communicator block"),
])
def test_malformed_reports_are_problems_not_a_healthy_job(text: str, problem: str) -> None:
    report = parse(text)
    assert any(problem in p for p in report.problems), report.problems
    assert report.ranks == []


def test_a_truncated_text_report_names_the_cut_line() -> None:
    text = _output("issue1762-2.27-incomplete-nocomm").read_text()
    report = parse(text[: text.index("Rank 1 --") + 12])  # cut inside the rank line
    assert any("not read: 'Rank 1 -- GP'" in p for p in report.problems)
