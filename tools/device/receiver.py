"""A local stand-in for the fabricscope API that the device scripts point the training hook at: it
keeps every posted item by kind (`collectives`, `steps`, ... from the path's last part) and answers
each post and the job registration (PUT) with 200. Not the server: the device machine runs the hook
alone (no PostgreSQL there), and what the scripts check is what the hook sent."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Receiver(BaseHTTPRequestHandler):
    received: dict[str, list[dict]]

    def _read(self) -> bytes:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        return gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        kind = self.path.rsplit("/", 1)[-1]
        items = json.loads(self._read()).get(kind, [])
        self.received.setdefault(kind, []).extend(items)
        self._answer(json.dumps({"accepted": len(items)}).encode())

    def do_PUT(self) -> None:  # noqa: N802 - the job registration (PUT /v1/jobs/{job})
        self._read()
        self.received.setdefault("jobs", []).append({"path": self.path})
        self._answer(b"{}")

    def _answer(self, out: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


def start_receiver() -> tuple[str, dict[str, list[dict]]]:
    """Serves on a free loopback port in a daemon thread; returns its URL and the items by kind
    (a dict the caller reads as posts arrive)."""
    received: dict[str, list[dict]] = {}
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", received
