"""``fabricscope import nccl-tests`` against a real HTTP server on 127.0.0.1 that records what it is
sent (the acceptance API itself is tested end to end in tests/acceptance once it exists)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fabricscope.collectors.training.importers.cli import import_app
from fabricscope.collectors.training.importers.nccl_tests import parse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
runner = CliRunner()
MTIME = 1_732_900_000.0


class Recorder(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[dict[str, Any]] = []
        self.status = 201
        self.first: list[int] = []  # statuses answered before ``status``, in order

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                 "type": self.headers.get("Content-Type"), "body": body})
        status = self.server.first.pop(0) if self.server.first else self.server.status
        reply = ({"id": len(self.server.seen), "rows": len(body["rows"])} if status == 201
                 else {"detail": "rows[0].busbw_gbps: must be >= 0"})
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Retry-After", "0")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass


@pytest.fixture
def server() -> Iterator[Recorder]:
    srv = Recorder()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _copy(tmp_path: Path, case: str, name: str) -> Path:
    dst = tmp_path / name
    shutil.copy(FIXTURES / case / "output.txt", dst)
    os.utime(dst, (MTIME, MTIME))
    return dst


def test_posts_each_run_with_fabric_labels_and_the_token(server: Recorder, tmp_path: Path) -> None:
    a3 = _copy(tmp_path, "nccl-h100-2node-16rank-a3mega", "a3mega.txt")
    rccl = _copy(tmp_path, "rccl-mi300x-2node-16rank", "mi300x.txt")
    (tmp_path / "tok").write_text("s3cret-ingest\n")
    res = runner.invoke(import_app, ["nccl-tests", str(a3), str(rccl), "--fabric", "prod-ib", "--label", "site=a",
                                     "--label", "rack=r1", "--url", server.url, "--token-file", str(tmp_path / "tok")])
    assert res.exit_code == 0, res.output
    assert [s["path"] for s in server.seen] == ["/v1/acceptance/runs"] * 2
    assert {s["auth"] for s in server.seen} == {"Bearer s3cret-ingest"}
    assert {s["type"] for s in server.seen} == {"application/json"}
    for sent, f in zip(server.seen, (a3, rccl), strict=True):
        (run,) = parse(f.read_text(), source=f.name)
        assert sent["body"] == json.loads(json.dumps(
            {"fabric": "prod-ib", "labels": {"site": "a", "rack": "r1"}, **run, "started_at": MTIME}))
    assert f"{a3}: all_reduce, 16 ranks, 2 nodes, 62 rows, avg busbw 70.742 GB/s, wrong 0, 0 problems" in res.stderr
    assert "s3cret" not in res.output


def test_dry_run_prints_json_lines_and_sends_nothing(tmp_path: Path) -> None:
    wrong = _copy(tmp_path, "nccl-gh200-2node-wrong-issue369", "allreduce.log")
    res = runner.invoke(import_app, ["nccl-tests", str(wrong), "--fabric", "lab", "--dry-run"])
    assert res.exit_code == 0, res.output
    (line,) = res.stdout.splitlines()
    body = json.loads(line)
    assert (body["fabric"], body["labels"], body["wrong_total"], body["started_at"]) == ("lab", {}, 128, MTIME)
    assert "wrong 128, 2 problems" in res.stderr
    assert f"{wrong}: line 43: .. gpu-1-1 pid 662195: Test failure common.cu:1189" in res.stderr


def test_unreadable_file_exits_2_and_the_others_still_go(server: Recorder, tmp_path: Path) -> None:
    good = _copy(tmp_path, "rccl-mi300x-1node-8rank", "good.txt")
    (tmp_path / "junk.txt").write_text("mpirun: command not found\n")
    res = runner.invoke(import_app, ["nccl-tests", str(tmp_path / "missing.txt"), str(tmp_path / "junk.txt"),
                                     str(good), "--fabric", "lab", "--url", server.url])
    assert res.exit_code == 2
    assert f"{tmp_path / 'missing.txt'}: cannot read: No such file or directory" in res.stderr
    assert "junk.txt: no nccl-tests output found" in res.stderr
    assert [s["body"]["source"] for s in server.seen] == ["good.txt"]


def test_runs_that_cannot_be_sent_or_are_refused_exit_1(server: Recorder, tmp_path: Path) -> None:
    failed = _copy(tmp_path, "nccl-rtx5090-2gpu-debuginfo-failed-issue287", "failed.txt")
    res = runner.invoke(import_app, ["nccl-tests", str(failed), "--fabric", "lab", "--url", server.url])
    assert res.exit_code == 1 and server.seen == []
    assert f"{failed}: not sent: no result rows" in res.stderr
    server.status = 422
    good = _copy(tmp_path, "superbench-a100-8gpu-c0-broadcast", "nccl_broadcast.log")
    res = runner.invoke(import_app, ["nccl-tests", str(good), "--fabric", "lab", "--url", server.url])
    assert res.exit_code == 1 and len(server.seen) == 1  # a 4xx is not retried
    assert "not sent: POST /v1/acceptance/runs: HTTP 422" in res.stderr and "busbw_gbps: must be >= 0" in res.stderr


def test_a_busy_service_is_tried_again(server: Recorder, tmp_path: Path) -> None:
    server.first = [503, 429]
    good = _copy(tmp_path, "rccl-mi300x-1node-8rank", "good.txt")
    res = runner.invoke(import_app, ["nccl-tests", str(good), "--fabric", "lab", "--url", server.url])
    assert res.exit_code == 0, res.output
    assert len(server.seen) == 3 and server.seen[0]["body"] == server.seen[2]["body"]


@pytest.mark.parametrize(("args", "message"), [
    (["--label", "site", "--dry-run"], "--label 'site': expected key=value"),
    (["--op", "allreduce", "--dry-run"], "--op 'allreduce': one of all_reduce"),
    (["--tz", "Mars/Olympus", "--dry-run"], "--tz 'Mars/Olympus': not a time zone name"),
    (["--fabric", " ", "--dry-run"], "--fabric: must not be empty"),
    ([], "--url (or FABRICSCOPE_URL) is required unless --dry-run"),
])
def test_bad_options_exit_2_with_the_option_named(args: list[str], message: str) -> None:
    out = FIXTURES / "rccl-mi300x-1node-8rank" / "output.txt"
    res = runner.invoke(import_app, ["nccl-tests", str(out), "--fabric", "lab", *args], env={"FABRICSCOPE_URL": ""})
    assert res.exit_code == 2 and message in res.stderr


def test_unreadable_token_file_is_named_not_shown(tmp_path: Path) -> None:
    out = FIXTURES / "rccl-mi300x-1node-8rank" / "output.txt"
    res = runner.invoke(import_app, ["nccl-tests", str(out), "--fabric", "lab", "--url", "http://127.0.0.1:9",
                                     "--token-file", str(tmp_path / "nope")])
    assert res.exit_code == 2 and f"--token-file {tmp_path / 'nope'}: cannot read" in res.stderr
