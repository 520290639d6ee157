"""The soak's hostile clients (#46), each from loopback addresses of its own (a client is its peer address):

- an idle flood: sockets that never send a byte, re-opened as soon as the server closes them;
- slow readers: expensive reads whose multi-MB answers are never read;
- wide series reads: a metric over thousands of series, read again and again;
- scope-less big bodies: a read-only token posting 63 MiB (declared) gzip bodies to ingest.

Each keeps counts of what the server did to it, for the soak's report.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
from collections import Counter

import httpx

WIDE_METRIC = "wide_bytes_total"


def seed_wide_source(url: str, token: str, source: str, *, series: int, points: int) -> None:
    """A source whose one metric has ``series`` series of ``points`` points each, for the wide reads."""
    t0 = time.time() - 1800
    per = max(1, 40_000 // points)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120, trust_env=False) as c:
        for k in range(0, series, per):
            lanes = range(k, min(series, k + per))
            samples = [{"ts": t0 + i, "source": source, "metric": WIDE_METRIC, "value": float(i),
                        "labels": {"lane": str(lane)}} for lane in lanes for i in range(points)]
            c.post("/v1/ingest/samples", json={"samples": samples}).raise_for_status()


def _connect(port: int, source: str, *, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


class IdleFlood(threading.Thread):
    """``n`` idle sockets from one address, each re-opened when the server closes it."""

    def __init__(self, port: int, n: int, stop: threading.Event, *, source: str = "127.0.0.2") -> None:
        super().__init__(name="idle-flood", daemon=True)
        self.port, self.n, self.stop, self.source = port, n, stop, source
        self.closed_by_server = self.opened = self.open_failures = 0

    def _open(self) -> socket.socket | None:
        try:
            s = _connect(self.port, self.source)
        except OSError:
            self.open_failures += 1
            return None
        self.opened += 1
        return s

    def run(self) -> None:
        socks: list[socket.socket | None] = [self._open() for _ in range(self.n)]
        while not self.stop.wait(0.5):
            for i, s in enumerate(socks):
                if s is not None and _closed(s):
                    self.closed_by_server += 1
                    s.close()
                    s = None
                socks[i] = s if s is not None else self._open()
        for s in socks:
            if s is not None:
                s.close()


class SlowReaders(threading.Thread):
    """``n`` clients (an address each) asking for ``path`` and never reading the answer; each connection is
    dropped and asked again once the server closes it, or after ``hold_s``."""

    def __init__(self, port: int, path: str, token: str, n: int, stop: threading.Event, *, hold_s: float = 60,
                 first: int = 30) -> None:
        super().__init__(name="slow-readers", daemon=True)
        self.port, self.path, self.token, self.n, self.stop, self.hold_s = port, path, token, n, stop, hold_s
        self.sources = [f"127.0.0.{first + i}" for i in range(n)]
        self.asked = self.closed_by_server = self.open_failures = 0

    def _ask(self, source: str) -> tuple[socket.socket, float] | None:
        try:
            s = _connect(self.port, source, rcvbuf=4096)
            s.sendall(f"GET {self.path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.token}\r\n\r\n".encode())
        except OSError:
            self.open_failures += 1
            return None
        self.asked += 1
        return s, time.monotonic()

    def run(self) -> None:
        held = [self._ask(src) for src in self.sources]
        while not self.stop.wait(0.5):
            for i, h in enumerate(held):
                if h is not None:
                    s, t = h
                    gone = _closed(s)
                    if not gone and time.monotonic() - t < self.hold_s:
                        continue
                    self.closed_by_server += gone
                    s.close()
                held[i] = self._ask(self.sources[i])
        for h in held:
            if h is not None:
                h[0].close()


class WideReads(threading.Thread):
    """``n`` clients (an address each) reading the wide metric back to back; statuses counted."""

    def __init__(self, url: str, path: str, token: str, n: int, stop: threading.Event, *, first: int = 40) -> None:
        super().__init__(name="wide-reads", daemon=True)
        self.url, self.path, self.token, self.n, self.stop = url, path, token, n, stop
        self.sources = [f"127.0.0.{first + i}" for i in range(n)]
        self.statuses: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _one(self, source: str) -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60,
                          transport=httpx.HTTPTransport(local_address=source), trust_env=False) as c:
            while not self.stop.is_set():
                try:
                    status = str(c.get(self.path).status_code)
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                with self._lock:
                    self.statuses[status] += 1
                if status == "429":
                    self.stop.wait(0.2)

    def run(self) -> None:
        threads = [threading.Thread(target=self._one, args=(src,), daemon=True) for src in self.sources]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


class ScopelessBodies(threading.Thread):
    """``n`` clients (an address each) posting to ingest with a read-only token, in turn: a 62 KiB gzip body
    that inflates to 63 MiB, and a plain body declared as 63 MiB (its first MiB sent)."""

    def __init__(self, port: int, token: str, n: int, stop: threading.Event, *, first: int = 50) -> None:
        super().__init__(name="scopeless-bodies", daemon=True)
        self.port, self.token, self.n, self.stop = port, token, n, stop
        self.sources = [f"127.0.0.{first + i}" for i in range(n)]
        self.statuses: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.bomb = gzip.compress(b"[" + b" " * (63 << 20) + b"]", 9)

    def _one(self, source: str) -> None:
        start = (f"POST /v1/ingest/samples HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.token}\r\n"
                 "Content-Type: application/json\r\n")
        bodies = [((start + f"Content-Encoding: gzip\r\nContent-Length: {len(self.bomb)}\r\n\r\n").encode(), self.bomb),
                  ((start + f"Content-Length: {63 << 20}\r\n\r\n").encode(), b"[" + b" " * ((1 << 20) - 1))]
        n = 0
        while not self.stop.is_set():
            head, body = bodies[n % 2]
            n += 1
            status = "no answer"
            try:
                with _connect(self.port, source) as s:
                    s.sendall(head)
                    with contextlib.suppress(OSError):  # refused before the body: the server closed
                        s.sendall(body)
                    s.settimeout(30)
                    data = s.recv(64)
                    if data.startswith(b"HTTP/1.1 "):
                        status = data.split(b" ", 2)[1].decode()
            except OSError as exc:
                status = type(exc).__name__
            with self._lock:
                self.statuses[status] += 1
            self.stop.wait(0.2)

    def run(self) -> None:
        threads = [threading.Thread(target=self._one, args=(src,), daemon=True) for src in self.sources]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def busy_counts(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10, trust_env=False).text
    out = {}
    for line in text.splitlines():
        if line.startswith("fabricscope_busy_rejected_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.split()[-1])
    return out
