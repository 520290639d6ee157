"""Start a real multi-process gloo job (one OS process per rank, torchrun-style environment)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("train_job.py")
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_job(world: int, workdir: Path, args: list[str], env: dict[str, str], *, script: Path = SCRIPT
              ) -> list[subprocess.Popen[bytes]]:
    port = free_port()
    procs = []
    for rank in range(world):
        e = {**os.environ, **env, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
             "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        log = open(workdir / f"rank{rank}.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen([sys.executable, str(script), *args, "--out", str(workdir / f"rank{rank}.json")],
                                      env=e, stdout=log, stderr=subprocess.STDOUT, cwd=REPO))
    return procs


def wait_job(procs: list[subprocess.Popen[bytes]], workdir: Path, timeout: float = 300) -> list[dict[str, Any]]:
    try:
        for p in procs:
            p.wait(timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, p in enumerate(procs):
        if p.returncode != 0:
            raise AssertionError(f"rank {rank} exited {p.returncode}:\n" + (workdir / f"rank{rank}.log").read_text())
    return [json.loads((workdir / f"rank{r}.json").read_text()) for r in range(len(procs))]


def run_job(world: int, workdir: Path, args: list[str], env: dict[str, str], timeout: float = 300,
            script: Path = SCRIPT) -> list[dict[str, Any]]:
    return wait_job(start_job(world, workdir, args, env, script=script), workdir, timeout)
