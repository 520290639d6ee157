"""The final dump on SIGTERM (collectors/training/farewell.py): real training processes get a real
SIGTERM and post to a real HTTP receiver; the sender's flush interval (60 s) is longer than the tests,
so what arrives came from the dump."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sinks.receiver import Receiver
from tests.training.launch import REPO, free_port

SCRIPT = Path(__file__).with_name("term_job.py")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def _env(receiver: Receiver, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "FABRICSCOPE_URL": receiver.url, "FABRICSCOPE_JOB": f"term-{uuid.uuid4().hex[:8]}",
            "FABRICSCOPE_SPOOL": str(tmp_path / "spool"), "FABRICSCOPE_JOB_LABELS": "0", "RANK": "0",
            "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def _start(mode: str, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(SCRIPT), "--mode", mode, *extra], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_line(p: subprocess.Popen[str], text: str, timeout: float = 60) -> None:
    assert p.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if text in line:
            return
        assert line or p.poll() is None, f"exited {p.returncode} before {text!r}"
    raise AssertionError(f"no {text!r} in {timeout} s")


def _events(receiver: Receiver, kind: str) -> list[dict[str, Any]]:
    return [e for e in receiver.items("events") if e["kind"] == kind]


def test_default_sigterm_still_kills_and_the_queued_records_go_out_first(receiver: Receiver, tmp_path: Path) -> None:
    p = _start("default", _env(receiver, tmp_path))
    _wait_line(p, "ready")
    assert receiver.items("steps") == []  # nothing sent yet: the flush interval is 60 s
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    rc = p.wait(10)
    took = time.monotonic() - t0
    assert rc == -signal.SIGTERM  # died of the signal, as without the hook
    assert took < 2.0 + 1.5  # FABRICSCOPE_TERM_FLUSH_S (2 s) bounds the dump
    steps, colls = receiver.items("steps"), receiver.items("collectives")
    assert len(steps) >= 20 and len(colls) >= 20
    assert [e["attrs"] for e in _events(receiver, "rank_exit")] == [{"rank": 0, "signal": "SIGTERM"}]


def test_the_programs_own_handler_still_runs_and_decides(receiver: Receiver, tmp_path: Path) -> None:
    p = _start("handler", _env(receiver, tmp_path))
    _wait_line(p, "ready")
    p.send_signal(signal.SIGTERM)
    assert p.stdout is not None
    out = p.stdout.read()
    assert p.wait(10) == 0 and "handled after" in out  # its handler ended the loop, it exited normally
    n = int(out.split("handled after ")[1].split()[0])
    assert len(receiver.items("steps")) == n  # every step: the dump, then close() at exit
    assert [e["attrs"] for e in _events(receiver, "rank_exit")] == [{"rank": 0, "signal": "SIGTERM"}]


def test_an_ignored_sigterm_stays_ignored_and_still_sends(receiver: Receiver, tmp_path: Path) -> None:
    p = _start("ignore", _env(receiver, tmp_path), "--seconds", "6")
    _wait_line(p, "ready")
    p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    while not receiver.items("steps") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert receiver.items("steps")  # the dump flushed them ...
    assert p.poll() is None  # ... and the process goes on
    assert p.wait(20) == 0


def test_a_forked_worker_dies_of_its_own_sigterm_and_the_parent_goes_on(receiver: Receiver, tmp_path: Path) -> None:
    p = _start("fork", _env(receiver, tmp_path))
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, out
    assert f"child signal {int(signal.SIGTERM)}" in out and "parent alive" in out
    assert [e["attrs"] for e in _events(receiver, "rank_exit")] == [{"rank": 0}]  # its clean close, no signal


def test_no_dump_when_turned_off(receiver: Receiver, tmp_path: Path) -> None:
    p = _start("default", _env(receiver, tmp_path, FABRICSCOPE_TERM_FLUSH_S="0"))
    _wait_line(p, "ready")
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == -signal.SIGTERM
    assert receiver.items("steps") == []  # as before this change: a SIGTERM'd rank lost its queue


@pytest.mark.slow
def test_a_rank_stuck_in_an_all_reduce_says_where_when_sigtermed(receiver: Receiver, tmp_path: Path) -> None:
    """gloo, 2 ranks: rank 0 blocks in C++ inside an all_reduce rank 1 never joins. Python's own
    handler cannot run there; the wakeup fd's thread does the dump, then the rank dies of SIGTERM."""
    env = _env(receiver, tmp_path, FABRICSCOPE_INFLIGHT_S="60", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), GLOO_SOCKET_IFNAME="lo")
    procs = [_start("hang", {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    try:
        _wait_line(procs[0], "entering", timeout=120)
        time.sleep(1.0)  # inside the all_reduce; the regular in-flight notice would wait 60 s
        assert not _events(receiver, "collective_entered")
        t0 = time.monotonic()
        procs[0].send_signal(signal.SIGTERM)
        assert procs[0].wait(10) == -signal.SIGTERM
        assert time.monotonic() - t0 < 2.0 + 1.5
        entered = [e["attrs"] for e in _events(receiver, "collective_entered")]
        assert entered == [{"rank": 0, "group": "world", "seq": 4, "op": "all_reduce", "step": 3,
                            "final": "SIGTERM"}]
        assert len([c for c in receiver.items("collectives") if c["rank"] == 0]) == 3  # the three done
        assert [e["attrs"] for e in _events(receiver, "rank_exit")] == [{"rank": 0, "signal": "SIGTERM"}]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
