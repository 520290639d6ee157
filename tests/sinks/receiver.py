"""A real HTTP server on 127.0.0.1 that records what the sender posts, for sender and hook tests.

It can be stopped and started again on the same port (a real outage: connection refused), and a
``respond`` callable decides each answer (status, headers, JSON body) to play 5xx, 413, 429, 4xx.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    status: int = 0


Responder = Callable[[Request], tuple[int, dict[str, str], Any]]


def accept_all(req: Request) -> tuple[int, dict[str, str], Any]:
    kind = req.path.rsplit("/", 1)[-1]
    n = len(req.body.get(kind, [])) if isinstance(req.body, dict) else 0
    return 200, {}, {"accepted": n}


@dataclass
class Receiver:
    port: int = 0
    respond: Responder = accept_all
    requests: list[Request] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Receiver:
        recv = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                data = gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw
                req = Request(self.command, self.path, dict(self.headers.items()), raw,
                              json.loads(data) if data else None)
                with recv._lock:
                    recv.requests.append(req)
                status, headers, body = recv.respond(req)
                req.status = status
                out = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_POST = do_PUT = _handle

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def posted(self, kind: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == f"/v1/ingest/{kind}"]

    def items(self, kind: str) -> list[dict[str, Any]]:
        """Items of accepted batches, each batch id counted once (as the service does)."""
        seen: set[str] = set()
        out: list[dict[str, Any]] = []
        for r in self.posted(kind):
            bid = r.body.get("batch_id")
            if r.status != 200 or bid in seen:
                continue
            seen.add(bid)
            out.extend(r.body[kind])
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
