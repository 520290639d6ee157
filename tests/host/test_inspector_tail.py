"""NCCL Inspector live (#45 item 5): the agent's tail of an Inspector output directory, on real files
growing under tmp_path, the real Sender posting to a real HTTP receiver, and the recorded Inspector
records (tests/fixtures/training/nccl-inspector-*, written as the plugin writes them: one compact JSON
object per line)."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabricscope.collectors import selfmetrics
from fabricscope.collectors.host.agent import Agent, sink_from_config
from fabricscope.collectors.host.config import InspectorConfig, parse_config
from fabricscope.collectors.sinks.factory import make_sink
from fabricscope.collectors.sinks.sender import Sender
from fabricscope.collectors.training.importers import nccl_inspector
from fabricscope.collectors.training.importers.inspector_live import InspectorTail
from tests.sinks.receiver import Receiver

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training"


def fixture_lines(case: str) -> list[bytes]:
    """The recorded records of one fixture as the plugin writes them: one JSON object a line."""
    objs = nccl_inspector.iter_objects((FIXTURES / case / "input.json").read_text())
    return [json.dumps(o, separators=(",", ":")).encode() + b"\n" for o in objs]


RECORDS = fixture_lines("nccl-inspector-two-records")  # rank 2 all_reduce, rank 4 reduce_scatter (verbose)
EXPECTED = nccl_inspector.read_objects(
    nccl_inspector.iter_objects((FIXTURES / "nccl-inspector-two-records" / "input.json").read_text())).collectives


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def sink(receiver: Receiver) -> Iterator[Sender]:
    s = make_sink(receiver.url, flush_interval_s=0.05)
    yield s
    s.close()


def append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        fh.write(data)


def tail(root: Path, sink: Sender, state: Path | None = None, **cfg: Any) -> InspectorTail:
    return InspectorTail("node07", InspectorConfig(enabled=True, dir=str(root), **cfg), sink, state_path=state)


def sent(receiver: Receiver, sink: Sender) -> list[dict[str, Any]]:
    assert sink.flush(5)
    return receiver.items("collectives")


def problems(device: str = "node07:nccl-inspector") -> float:
    assert selfmetrics.REGISTRY is not None
    v = selfmetrics.REGISTRY.get_sample_value("fabricscope_collector_parse_problems_total",
                                              {"device": device, "format": "nccl-inspector"})
    return v or 0.0


def test_partial_lines_wait_for_the_next_poll_and_records_match_the_importer(
        tmp_path: Path, receiver: Receiver, sink: Sender) -> None:
    f = tmp_path / "job-a" / "node07-pid1639453.log"
    t = tail(tmp_path, sink)
    first, second = RECORDS
    append(f, first[:100])  # the plugin is half-way through its first line
    t.poll()
    assert sent(receiver, sink) == [] and t.files[str(f)].offset == 0
    append(f, first[100:] + second[:-1])  # first complete, second without its newline
    t.poll()
    assert sent(receiver, sink) == EXPECTED[:1]
    append(f, b"\n")
    t.poll()
    got = sent(receiver, sink)
    assert got == EXPECTED and [(c["rank"], c["op"], c["seq"]) for c in got] == [
        (2, "all_reduce", 1407), (4, "reduce_scatter", 1231)]
    assert {r.body["job"] for r in receiver.posted("collectives")} == {"job-a"}  # the directory names the job
    puts = [r for r in receiver.requests if r.method == "PUT"]
    assert [r.path for r in puts] == ["/v1/jobs/job-a", "/v1/jobs/job-a"]
    assert [x for r in puts for x in r.body["ranks"]] == [
        {"rank": 2, "host": "node07", "inspector_hostname": "example-hostname"},
        {"rank": 4, "host": "node07", "inspector_hostname": "example-hostname"}]
    t.poll()  # nothing new: nothing sent again, no second registration
    assert len(sent(receiver, sink)) == 2 and len([r for r in receiver.requests if r.method == "PUT"]) == 2


def test_offsets_and_the_v43_marker_context_survive_an_agent_restart(
        tmp_path: Path, receiver: Receiver, sink: Sender) -> None:
    root, state = tmp_path / "dump", tmp_path / "state" / "agent.spool.inspector-offsets.json"
    f = root / "nccl-inspector-4242" / "node07-pid7.log"
    header = {"id": "0xabc", "rank": 5, "n_ranks": 8, "nnodes": 1}
    meta = {"inspector_output_format_version": "v4.3", "dump_timestamp_us": 1748030377748202, "hostname": "n7",
            "pid": 7}
    coll = {"coll": "AllGather", "coll_sn": 1, "coll_msg_size_bytes": 4096, "coll_exec_time_us": 10}
    append(f, json.dumps({"header": header, "metadata": meta, "dump_stats": {"coll_records": 2}}).encode() + b"\n"
           + json.dumps({"coll_perf": coll}).encode() + b"\n")
    tail(root, sink, state).poll()
    assert [(c["rank"], c["seq"]) for c in sent(receiver, sink)] == [(5, 1)]
    assert {r.body["job"] for r in receiver.posted("collectives")} == {"4242"}  # the plugin's default dir name
    # a new agent process: the same state file, one more record after the marker
    append(f, json.dumps({"coll_perf": {**coll, "coll_sn": 2}}).encode() + b"\n")
    t2 = tail(root, sink, state)
    t2.poll()
    assert [(c["rank"], c["seq"], c["op"], c["group"]) for c in sent(receiver, sink)] == [
        (5, 1, "all_gather", "0xabc"), (5, 2, "all_gather", "0xabc")]  # seq 1 not sent twice


def test_truncated_and_rotated_files_are_read_from_their_start(
        tmp_path: Path, receiver: Receiver, sink: Sender) -> None:
    f = tmp_path / "j" / "node07-pid1.log"
    append(f, RECORDS[0] + RECORDS[1])
    t = tail(tmp_path, sink)
    t.poll()
    assert len(sent(receiver, sink)) == 2
    f.write_bytes(RECORDS[1])  # truncated and rewritten shorter (a new process with the same pid)
    t.poll()
    assert [c["seq"] for c in sent(receiver, sink)] == [1407, 1231, 1231]
    f.rename(f.with_name("node07-pid1.log.1"))  # rotated away; a new file with a new inode takes the name
    append(f, RECORDS[0] + RECORDS[1] + RECORDS[0])
    assert os.stat(f).st_size > t.files[str(f)].offset  # the size check alone would not notice
    t.poll()
    assert [c["seq"] for c in sent(receiver, sink)] == [1407, 1231, 1231, 1407, 1231, 1407]
    assert t.stats["restarts"] == 2


def test_a_malformed_line_is_one_problem_named_with_its_file_and_the_rest_is_kept(
        tmp_path: Path, receiver: Receiver, sink: Sender, caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "j" / "node07-pid2.log"
    append(f, RECORDS[0] + b'{"header": {"id": "0x1", "rank": \n' + RECORDS[1])
    device = "bad-node:nccl-inspector"
    before = problems(device)
    t = InspectorTail("bad-node", InspectorConfig(enabled=True, dir=str(tmp_path)), sink)
    with caplog.at_level(logging.WARNING, logger="fabricscope.agent.inspector"):
        t.poll()
    assert [c["seq"] for c in sent(receiver, sink)] == [1407, 1231]
    assert problems(device) - before == 1 and t.stats["problems"] == 1
    assert f"{f}: line at byte {len(RECORDS[0])} not JSON" in caplog.text


def test_each_poll_reads_a_bounded_amount_and_takes_the_files_in_turn(
        tmp_path: Path, receiver: Receiver, sink: Sender) -> None:
    line = RECORDS[0]
    a, b = tmp_path / "j" / "node07-pid1.log", tmp_path / "j" / "node07-pid2.log"
    append(a, line * 6)
    append(b, line * 6)
    t = tail(tmp_path, sink, max_bytes_per_poll=2 * len(line) + 10, max_line_bytes=2 * len(line))
    counts = []
    for _ in range(6):
        t.poll()
        counts.append((t.files[str(a)].offset // len(line) if str(a) in t.files else 0,
                       t.files[str(b)].offset // len(line) if str(b) in t.files else 0))
    assert all(sum(x) - sum(y) <= 2 for x, y in zip(counts[1:], counts, strict=False))  # 2 lines a poll at most
    assert counts[1][0] > 0 and counts[1][1] > 0  # both files move, neither waits for the other to finish
    assert counts[-1] == (6, 6) and len(sent(receiver, sink)) == 12


def test_an_over_long_line_is_dropped_to_its_newline_and_a_file_without_a_job_is_named(
        tmp_path: Path, receiver: Receiver, sink: Sender, caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "j" / "node07-pid3.log"
    append(f, b'{"x": "' + b"y" * 3000 + b'"}\n' + RECORDS[0])
    append(tmp_path / "node07-pid9.log", RECORDS[1])  # directly under dir: no job named
    t = tail(tmp_path, sink, max_bytes_per_poll=1000, max_line_bytes=1000)
    with caplog.at_level(logging.WARNING, logger="fabricscope.agent.inspector"):
        for _ in range(6):
            t.poll()
    assert [c["seq"] for c in sent(receiver, sink)] == [1407]
    assert "line at byte 0 over 1000 bytes" in caplog.text
    assert "node07-pid9.log: no job" in caplog.text and caplog.text.count("node07-pid9.log: no job") == 1


def test_file_hosts_reads_only_this_hosts_files_of_a_shared_directory(
        tmp_path: Path, receiver: Receiver, sink: Sender) -> None:
    append(tmp_path / "j" / "node07-pid1.log", RECORDS[0])
    append(tmp_path / "j" / "node08-pid1.log", RECORDS[1])
    t = tail(tmp_path, sink, file_hosts=("node07",))
    t.poll()
    assert [c["rank"] for c in sent(receiver, sink)] == [2]


def test_the_agent_loop_tails_a_growing_directory_into_the_server(
        tmp_path: Path, service_url: str, db_conn: Any) -> None:
    """End to end: the real Agent loop, the real service and its database."""
    job = f"insp-live-{uuid.uuid4().hex[:8]}"
    off = {"enabled": False}
    cfg = parse_config({"host": "node07", "sink": {"url": service_url, "spool_path": str(tmp_path / "agent.spool"),
                                                   "flush_interval_s": 0.1},
                        "nic": off, "rdma": off, "storage": off, "gpu": off, "tcp": off, "pressure": off,
                        "nccl_inspector": {"enabled": True, "dir": str(tmp_path / "dump"), "interval_s": 0.1}})
    sink = sink_from_config(cfg.sink)
    agent, stop = Agent(cfg, sink), threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    loop.start()

    def rows() -> list[tuple[Any, ...]]:
        return db_conn.execute("SELECT rank, op, seq, bytes, group_name, group_size FROM collectives WHERE job = %s"
                               " ORDER BY seq", (job,)).fetchall()

    def wait_rows(n: int) -> list[tuple[Any, ...]]:
        deadline = time.monotonic() + 15
        while len(got := rows()) < n and time.monotonic() < deadline:
            time.sleep(0.1)
        return got

    try:
        f = tmp_path / "dump" / job / "node07-pid11.log"
        append(f, RECORDS[1][:50])
        time.sleep(0.5)
        append(f, RECORDS[1][50:] + RECORDS[0][:-1])
        assert wait_rows(1) == [(4, "reduce_scatter", 1231, 2147483648, "0xe62dedaa97644a", 8)]
        append(f, b"\n")
        assert wait_rows(2)[0] == (4, "reduce_scatter", 1231, 2147483648, "0xe62dedaa97644a", 8)
        assert wait_rows(2)[1] == (2, "all_reduce", 1407, 17179869184, "0x7f8c496ae9f661", 8)
    finally:
        stop.set()
        loop.join(10)
        sink.flush(10)
        sink.close()
    ranks = db_conn.execute("SELECT rank, host FROM job_ranks WHERE job = %s ORDER BY rank", (job,)).fetchall()
    assert ranks == [(2, "node07"), (4, "node07")]
    offsets = json.loads((tmp_path / "agent.spool.inspector-offsets.json").read_text())["files"]
    assert offsets[str(f)]["offset"] == f.stat().st_size
    assert len(rows()) == 2
