"""Real local webhook receivers for the tests: an HTTP server (ok / 500 / slow) and a TCP server that
answers garbage. Each records what it received."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    port: int
    mode: str = "ok"  # ok | 500 | slow
    slow_s: float = 30.0
    got: list[Received] = field(default_factory=list)
    _server: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook/s3cr3t-path"

    def start(self) -> Receiver:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                rec.got.append(Received({k.lower(): v for k, v in self.headers.items()}, body))
                if rec.mode == "slow":
                    time.sleep(rec.slow_s)
                code = 500 if rec.mode == "500" else 200
                self.send_response(code)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class GarbageServer:
    """Accepts a connection, reads a little, answers bytes that are not HTTP, closes."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connections = 0
        outer = self

        class H(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer.connections += 1
                self.request.settimeout(2)
                try:
                    self.request.recv(65536)
                    self.request.sendall(b"\x00\xffNOT HTTP AT ALL\r\n\r\n\x13\x37" * 8)
                except OSError:
                    pass

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", port), H)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
