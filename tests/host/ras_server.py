"""A real TCP server on 127.0.0.1 that speaks NCCL RAS's client protocol and replays a recorded report
(tests/fixtures/nccl-ras; the exchange as NCCL's src/ras/client_support.cc answers it, see that
directory's SOURCES.md). The allowed fake: RAS runs inside NCCL processes, which need GPUs."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/nccl-ras"


class RasServer:
    """``json``: answers SET FORMAT json with OK (NCCL 2.28.7+) and replays ``json_case``; otherwise
    with NCCL's ERROR line and replays ``text_case``. ``stall``: answers the handshake, then never the
    STATUS. ``hello``: the first answer (a server that is not RAS)."""

    def __init__(self, *, text_case: str | None = None, json_case: str | None = None, json: bool = True,
                 stall: bool = False, hello: bytes = b"SERVER PROTOCOL 2\n", chunk: int = 97) -> None:
        self.text = (FIXTURES / text_case / "output.txt").read_bytes() if text_case else b""
        self.json_text = (FIXTURES / json_case / "output.json").read_bytes() if json_case else b""
        self.json, self.stall, self.hello, self.chunk = json, stall, hello, chunk
        self.commands: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                self._client(conn)

    def _client(self, conn: socket.socket) -> None:
        buf, fmt = b"", "text"
        conn.settimeout(5)
        while True:
            try:
                data = conn.recv(4096)
            except (TimeoutError, OSError):
                return
            if not data:
                return
            buf += data
            while b"\n" in buf:
                raw, _, buf = buf.partition(b"\n")
                cmd = raw.decode().rstrip("\r")
                self.commands.append(cmd)
                low = cmd.lower()
                if low.startswith("client protocol "):
                    conn.sendall(self.hello)
                elif low.startswith("timeout "):
                    conn.sendall(b"OK\n")
                elif low.startswith("set format "):
                    ok = self.json and low.endswith(" json")
                    fmt = "json" if ok else fmt
                    conn.sendall(b"OK\n" if ok else f"ERROR: Unknown command {cmd}\n".encode())
                elif low in ("status", "verbose status"):
                    if self.stall:
                        time.sleep(3)
                        return
                    self._report(conn, self.json_text if fmt == "json" else self.text)
                    return  # NCCL closes the connection after the report
                else:
                    conn.sendall(f"ERROR: Unknown command {cmd}\n".encode())

    def _report(self, conn: socket.socket, text: bytes) -> None:
        # NCCL sends the report in several messages as the data comes in
        for i in range(0, len(text), self.chunk):
            conn.sendall(text[i:i + self.chunk])
            time.sleep(0.001)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
