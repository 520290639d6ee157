"""The soak's load: ingest clients (the real HttpSender), readers, idle and slow sockets, an RSS sampler.

Every request is recorded as (start, end, status) with status None for no answer at all, so the
soak can tell a 5xx inside the injected database restart from one outside it.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fabricscope.collectors.sinks.http import HttpTransport
from fabricscope.collectors.sinks.sender import Sender
from fabricscope.core.transport import Batch, Outcome

_STATUS = re.compile(r"HTTP (\d{3})")


@dataclass
class Log:
    """Requests of one kind: (start, end, status, what); appends from many threads (list.append is atomic)."""

    rows: list[tuple[float, float, int | None, str]] = field(default_factory=list)

    def add(self, start: float, end: float, status: int | None, what: str) -> None:
        self.rows.append((start, end, status, what))


class TimedTransport:
    """The real HTTP transport, each send timed and its status kept (the Sender does the retrying)."""

    def __init__(self, inner: HttpTransport, log: Log) -> None:
        self.inner, self.log, self.timeout_s = inner, log, inner.timeout_s

    def __repr__(self) -> str:  # the sender names its transport in "unreachable; spooling" lines
        return repr(self.inner)

    def send(self, batch: Batch) -> Outcome:
        t = time.monotonic()
        out = self.inner.send(batch)
        m = _STATUS.search(out.reason)
        self.log.add(t, time.monotonic(), 200 if out.kind == "ok" else int(m.group(1)) if m else None, batch.kind)
        return out

    def close(self) -> None:
        self.inner.close()


class IngestClient(threading.Thread):
    """Every ``tick`` seconds: one point for each of its series, one training step; an event every 50
    ticks. Values are unique per client, and what was submitted is summed here to check the database."""

    def __init__(self, i: int, run: str, url: str, token: str, spool: Path, log: Log, stop: threading.Event,
                 *, sources: int = 25, tick: float = 0.2) -> None:
        super().__init__(name=f"ingest-{i}", daemon=True)
        self.i, self.stop, self.tick, self.sources = i, stop, tick, sources
        self.prefix = f"{run}c{i}"
        self.job = f"{run}-job{i}"
        self.sender = Sender(TimedTransport(HttpTransport(url, token=token, timeout_s=10), log),
                             spool_path=spool, flush_interval_s=0.5, name=f"sender-{i}")
        self.samples = self.steps = self.events = 0
        self.value_sum = self.duration_sum = 0.0

    def run(self) -> None:
        self.sender.put_job(self.job, {"ranks": [{"rank": 0, "host": f"{self.prefix}h0", "gpu": "gpu0"}]})
        n = 0
        next_t = time.monotonic()
        while not self.stop.is_set():
            now = time.time()
            for s in range(self.sources):
                for m, metric in enumerate(("rx_bytes_total", "queue_occupancy_bytes")):
                    value = float(n * 1000 + s * 2 + m)
                    self.sender.submit("samples", {"ts": now, "source": f"{self.prefix}h{s}:eth0",
                                                   "metric": metric, "value": value})
                    self.samples += 1
                    self.value_sum += value
            duration = 0.1 + (n % 7) * 0.001
            self.sender.submit("steps", {"rank": 0, "step": n, "start": now - duration, "end": now}, job=self.job)
            self.steps += 1
            self.duration_sum += duration
            if n % 50 == 0:
                self.sender.submit("events", {"kind": "checkpoint", "source": f"{self.prefix}h0", "job": self.job,
                                              "start": now})
                self.events += 1
            n += 1
            next_t += self.tick
            self.stop.wait(max(0.0, next_t - time.monotonic()))

    def submitted(self) -> dict[str, Any]:
        return {"samples": self.samples, "value_sum": self.value_sum, "steps": self.steps,
                "duration_sum": self.duration_sum, "events": self.events}


class Reader(threading.Thread):
    """A dashboard-like client: the read endpoints in turn, ``interval`` seconds apart (with ``report``,
    the per-job report too)."""

    def __init__(self, i: int, url: str, token: str, clients: list[IngestClient], log: Log, stop: threading.Event,
                 *, interval: float, report: bool = False) -> None:
        super().__init__(name=f"reader-{i}", daemon=True)
        self.i, self.url, self.token, self.clients, self.log = i, url, token, clients, log
        self.stop, self.interval, self.report = stop, interval, report

    def paths(self, n: int) -> list[tuple[str, str]]:
        """(what, path): the read endpoints of docs/API.md, on one client's job and sources."""
        c = self.clients[(self.i + n) % len(self.clients)]
        src = f"{c.prefix}h{n % c.sources}"
        out = [("jobs", "/v1/jobs"), ("job", f"/v1/jobs/{c.job}"), ("steps", f"/v1/jobs/{c.job}/steps"),
               ("sources", f"/v1/sources?device={src}"),
               ("metric", f"/v1/sources/{src}:eth0/metrics/rx_bytes_total?step=10"), ("alerts", "/v1/alerts")]
        # The per-job report runs the attribution over every step (bench/attribution.py measures it).
        return [*out, ("report", f"/v1/jobs/{c.job}/report")] if self.report else out

    def run(self) -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30,
                          trust_env=False) as client:
            n = 0
            while not self.stop.is_set():
                for what, path in self.paths(n):
                    t = time.monotonic()
                    try:
                        status: int | None = client.get(path).status_code
                    except httpx.HTTPError:
                        status = None
                    self.log.add(t, time.monotonic(), status, what)
                    if self.stop.wait(self.interval):
                        return
                n += 1


class IdleSockets(threading.Thread):
    """Half the sockets connect and say nothing; the other half send a request's headers a line every
    ``drip`` seconds and never finish. One the server closes is counted and opened again."""

    def __init__(self, port: int, n: int, stop: threading.Event, *, drip: float = 2.0) -> None:
        super().__init__(name="idle-sockets", daemon=True)
        self.port, self.n, self.stop, self.drip = port, n, stop, drip
        self.closed_by_server = {"idle": 0, "slow": 0}
        self.open_failures = 0

    def _open(self, slow: bool) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:
            self.open_failures += 1
            return None
        s.setblocking(False)
        if slow:
            s.send(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        return s

    def run(self) -> None:
        socks: list[socket.socket | None] = [self._open(i % 2 == 1) for i in range(self.n)]
        while not self.stop.wait(self.drip):
            for i, s in enumerate(socks):
                slow = i % 2 == 1
                if s is not None and not self._alive(s, slow):
                    self.closed_by_server["slow" if slow else "idle"] += 1
                    s.close()
                    s = None
                socks[i] = s if s is not None else self._open(slow)
        for s in socks:
            if s is not None:
                s.close()

    def _alive(self, s: socket.socket, slow: bool) -> bool:
        try:
            if s.recv(65536, socket.MSG_PEEK) == b"":
                return False
        except BlockingIOError:
            pass  # nothing from the server: still open
        except OSError:
            return False
        if slow:
            try:
                s.send(b"X-Slow: %d\r\n" % int(time.time()))
            except OSError:
                return False
        return True


def rss_bytes(pid: int) -> int:
    """Resident set size of one process (psutil when installed, else /proc)."""
    try:
        import psutil
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.NoSuchProcess as exc:
        raise ProcessLookupError(pid) from exc


class RssSampler(threading.Thread):
    def __init__(self, pid: int, stop: threading.Event, every: float = 1.0) -> None:
        super().__init__(name="rss", daemon=True)
        self.pid, self.stop, self.every = pid, stop, every
        self.samples: list[tuple[float, int]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append((time.monotonic(), rss_bytes(self.pid)))
            except (OSError, ValueError):
                return  # the process is gone
            self.stop.wait(self.every)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
