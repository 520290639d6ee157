"""Fixtures of the bus tests: a private nats-server per test, writer processes, row checksums."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.bus.natsd import NatsServer
from tests.support import REPO


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    d = Path(tempfile.mkdtemp(prefix="fabricscope-nats-"))
    srv = NatsServer(d)
    srv.start()
    yield srv
    srv.stop()
    shutil.rmtree(d, ignore_errors=True)


class Writers:
    """``python -m service.bus.cli`` processes (what ``fabricscope writer`` runs)."""

    def __init__(self, database_url: str, nats_url: str, log_dir: Path, **env: str) -> None:
        self.database_url = database_url
        self.nats_url = nats_url
        self.log_dir = log_dir
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICSCOPE_")}
        env.update({"DATABASE_URL": self.database_url, "FABRICSCOPE_NATS_URL": self.nats_url,
                    "FABRICSCOPE_DATA_DIR": str(self.log_dir / "data"), "FABRICSCOPE_LOG_LEVEL": "INFO",
                    "FABRICSCOPE_WRITER_ACK_WAIT_S": "5", **self.env})
        out = (self.log_dir / f"{name}.log").open("ab")
        p = subprocess.Popen([sys.executable, "-m", "fabricscope.service.bus.cli", "--name", name], cwd=REPO, env=env,
                             stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def logs(self) -> str:
        return "\n".join(f"== {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:])
                         for f in sorted(self.log_dir.glob("*.log")))

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


@pytest.fixture
def make_writers(tmp_path: Path) -> Iterator[Callable[..., Writers]]:
    made: list[Writers] = []

    def make(database_url: str, nats_url: str, **env: str) -> Writers:
        w = Writers(database_url, nats_url, tmp_path, **env)
        made.append(w)
        return w

    yield make
    for w in made:
        w.stop_all()
