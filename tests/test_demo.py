"""`make run`'s main job: `fabricscope demo` on its own embedded PostgreSQL, from start to a clean stop."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support import REPO, free_port, wait_for_path


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICSCOPE_") and k != "DATABASE_URL"}
    env.update(FABRICSCOPE_DATA_DIR=str(data_dir), FABRICSCOPE_EMBEDDED_PORT=str(free_port()))
    return env


@pytest.mark.slow
def test_demo_finds_the_injected_faults_and_stops_the_database() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="fabricscope-demo-"))
    try:
        out = subprocess.run([sys.executable, "-m", "fabricscope", "demo", "--exit", "--port", str(free_port()),
                              "--hosts", "4", "--gpus-per-host", "4", "--steps", "90", "--faults", "3"],
                             cwd=REPO, env=_env(data_dir), capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        rows = [line for line in out.stdout.splitlines() if re.match(r"\s+\d+\s+\d", line)]
        assert rows, out.stdout
        assert sum(line.endswith("✓") for line in rows) >= len(rows) * 0.8, out.stdout
        # #19: the recorded nccl-tests run is the fabric's baseline; the NIC fault of this seed costs bandwidth
        assert "bus bandwidth vs acceptance (fabric demo-fabric: all_reduce_perf-a100-8gpu-superbench.txt" in out.stdout
        bw = [line.split() for line in out.stdout.splitlines() if re.match(r"\s+\d+ MiB\s+[\d.]+ GB/s", line)]
        assert bw and all(0.2 < float(b[4]) <= 1.0 and float(b[5]) < float(b[4]) for b in bw), out.stdout
        # #48: the fleet ledger's top three components by GPU-hours lost
        # (at most three: this short run's faults may name fewer components; `make run`'s six name more)
        head, tail = out.stdout.split("fleet: top components by GPU-hours lost", 1)
        fleet = [m for f in tail.splitlines()[1:4]
                 if (m := re.match(r"  \d\. (\S+) \(\w+\): ([\d.]+) GPU-hours", f))]
        assert fleet and all(f"  {m[1]}  " in head or f" {m[1]} " in head for m in fleet), out.stdout
        hours = [float(m[2]) for m in fleet]
        assert hours == sorted(hours, reverse=True) and hours[0] > 0, out.stdout
        assert "embedded PostgreSQL stopped" in out.stderr
        assert not (data_dir / "pg" / "postmaster.pid").exists()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _servers_on(data_dir: Path) -> list[str]:
    """Command lines of live processes that name `data_dir` (a postmaster or initdb's backend)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(data_dir) in cmd and "fabricscope" not in cmd.split(" ", 1)[0]:
            found.append(cmd)
    return found


# 0 s: the first postmaster.pid is initdb's single-user backend's, so the signal lands in the
# database's start (initdb, pg_ctl's wait, creating the database); 3 s: in the feed or while serving.
# SIGHUP (#46 item 9): a closed terminal or ssh session stops the demo as SIGTERM does.
@pytest.mark.slow
@pytest.mark.parametrize(("sig", "after_s"), [(signal.SIGTERM, 0.0), (signal.SIGTERM, 3.0), (signal.SIGHUP, 0.0),
                                              (signal.SIGHUP, 3.0)],
                         ids=["term-at-start", "term-running", "hup-at-start", "hup-running"])
def test_demo_stops_the_database_on_sigterm(sig: signal.Signals, after_s: float) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="fabricscope-demo-"))
    try:
        proc = subprocess.Popen([sys.executable, "-m", "fabricscope", "demo", "--port", str(free_port()),
                                 "--hosts", "2", "--gpus-per-host", "2", "--steps", "40", "--faults", "1"],
                                cwd=REPO, env=_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_path(data_dir / "pg" / "postmaster.pid", 240)
        time.sleep(after_s)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert "embedded PostgreSQL stopped" in err, err[-2000:]
        assert proc.returncode == 0, err[-2000:]
        assert not (data_dir / "pg" / "postmaster.pid").exists()
        assert _servers_on(data_dir) == [], err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def test_the_database_waits_for_a_server_still_finishing_a_background_job(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo stops its embedded database only once the server thread is done: a shutdown that
    outlasts the first wait (a rollup job still running) is waited for, with a line saying so."""
    import threading

    from fabricscope.service import demo

    monkeypatch.setattr(demo, "SHUTDOWN_NOTICE_S", 0.01)
    release = threading.Event()
    thread = threading.Thread(target=release.wait, args=(30,), daemon=True)
    thread.start()
    threading.Timer(0.3, release.set).start()
    demo._wait_for_server(thread)
    assert not thread.is_alive()
    assert "waiting for a background job" in capsys.readouterr().err
