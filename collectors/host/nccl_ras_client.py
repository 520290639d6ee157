"""The host agent's query of NCCL RAS (#45 item 4): ask the RAS port of the NCCL jobs on this host
(``NCCL_RAS_ADDR``, 127.0.0.1:28028 by default) for their status, as ``ncclras`` does, and post what
it says as an ``nccl_ras`` event.

The exchange (NCCL's ``src/ras/client.cc``; lines, case-insensitive): ``CLIENT PROTOCOL 2`` is
answered ``SERVER PROTOCOL <n>``; ``TIMEOUT <s>`` (how long RAS waits for the job's other
processes) ``OK``; ``SET FORMAT json`` ``OK`` from 2.28.7, ``ERROR: ...`` before (then the text
report is read, with ``format: auto``); ``STATUS`` is answered with the report, after which the server
closes the connection. The whole exchange has one deadline (``timeout_s``).

A refused connection is the normal state of a host with no NCCL job: logged at debug, nothing
counted, nothing posted. An answer that is not the protocol, a deadline passed, or a report with
lines not read is one problem per poll in
``fabricscope_collector_parse_problems_total{device="<host>:nccl-ras", format="nccl-ras"}``; a
timed-out or refused report is not posted (half a report reads as a healthier job than it is).
A report naming troubled ranks or processes is posted on every poll (the hang answer uses the
newest one); a clean report is posted once, when the trouble clears.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from fabricscope.collectors.host.config import NcclRasConfig
from fabricscope.collectors.host.nccl_ras import event, parse
from fabricscope.collectors.host.nccl_ras_report import FORMAT
from fabricscope.collectors.selfmetrics import report_problems
from fabricscope.core.errors import CollectionError
from fabricscope.core.model import Event, Sample, now

log = logging.getLogger("fabricscope.agent.nccl_ras")

PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL, unchanged from 2.24 to 2.30
MAX_REPORT_BYTES = 32 << 20  # a 10k-GPU verbose report is a few MB


class RasRefused(CollectionError):
    """Nothing listens on the RAS address: no NCCL job on this host (or RAS disabled)."""


class RasProtocolError(CollectionError):
    """The peer did not answer as NCCL RAS does, or not within the deadline."""


@dataclass(frozen=True)
class RasAnswer:
    text: str
    format: str  # what the report is in: "json" or "text"
    server_protocol: str


class _Conn:
    """Line reads and the read to the end, all under one deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline, self.buf = sock, deadline, b""

    def _recv(self) -> bytes:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise RasProtocolError("no complete answer within timeout_s")
        self.sock.settimeout(left)
        try:
            return self.sock.recv(1 << 16)
        except TimeoutError as e:
            raise RasProtocolError("no complete answer within timeout_s") from e

    def ask(self, command: str) -> str:
        self.sock.sendall(command.encode() + b"\n")
        while b"\n" not in self.buf:
            chunk = self._recv()
            if not chunk:
                raise RasProtocolError(f"connection closed before the answer to {command!r}")
            self.buf += chunk
            if len(self.buf) > 4096:
                raise RasProtocolError(f"no line in the first 4096 bytes of the answer to {command!r}")
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace").strip()

    def rest(self, command: str) -> str:
        self.sock.sendall(command.encode() + b"\n")
        chunks, size = [self.buf], len(self.buf)
        while chunk := self._recv():
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REPORT_BYTES:
                raise RasProtocolError(f"report over {MAX_REPORT_BYTES} bytes")
        return b"".join(chunks).decode(errors="replace")


def query(host: str, port: int, *, fmt: str = "auto", collect_timeout_s: int = 5, timeout_s: float = 15.0,
          verbose: bool = False) -> RasAnswer:
    """One status report. Raises :class:`RasRefused` where nothing listens, :class:`RasProtocolError`
    on any other failure (OSError kept as the cause)."""
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except ConnectionRefusedError as e:
        raise RasRefused(f"{host}:{port}: connection refused") from e
    except OSError as e:
        raise RasProtocolError(f"{host}:{port}: {e.strerror or e}") from e
    with sock:
        conn = _Conn(sock, deadline)
        try:
            hello = conn.ask(f"CLIENT PROTOCOL {PROTOCOL}")
            if not hello.upper().startswith("SERVER PROTOCOL "):
                raise RasProtocolError(f"not an NCCL RAS server: answered {hello[:80]!r} to the handshake")
            _expect_ok(conn.ask(f"TIMEOUT {collect_timeout_s}"), "TIMEOUT")
            got = "text"
            if fmt in ("auto", "json"):
                reply = conn.ask("SET FORMAT json")
                if reply.upper() == "OK":
                    got = "json"
                elif fmt == "json" or not reply.upper().startswith("ERROR"):
                    raise RasProtocolError(f"SET FORMAT json answered {reply[:80]!r}")
            text = conn.rest("VERBOSE STATUS" if verbose else "STATUS")
        except OSError as e:  # reset, broken pipe
            raise RasProtocolError(f"{host}:{port}: {e.strerror or e}") from e
    return RasAnswer(text, got, hello[len("SERVER PROTOCOL "):].strip())


def _expect_ok(reply: str, command: str) -> None:
    if reply.upper() != "OK":
        raise RasProtocolError(f"{command} answered {reply[:80]!r}")


def split_addr(addr: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (NCCL_RAS_ADDR's form)."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class NcclRasCollector:
    """A :class:`~fabricscope.core.model.Collector` whose poll posts ``nccl_ras`` events and returns no samples."""

    name = "nccl-ras"

    def __init__(self, host: str, cfg: NcclRasConfig, emit: Callable[[Event], None]) -> None:
        self.host, self.cfg, self.emit = host, cfg, emit
        self.addr = split_addr(cfg.addr)
        self.device = f"{host}:{self.name}"
        self.troubled = False
        self.stats = {"queries": 0, "refused": 0, "failed": 0, "reports": 0, "posted": 0}

    def poll(self) -> list[Sample]:
        self.stats["queries"] += 1
        c = self.cfg
        try:
            answer = query(*self.addr, fmt=c.format, collect_timeout_s=c.collect_timeout_s, timeout_s=c.timeout_s,
                           verbose=c.verbose)
        except RasRefused as e:
            self.stats["refused"] += 1
            log.debug("%s: %s (no NCCL job on this host)", self.device, e)
            return []
        except RasProtocolError as e:
            self.stats["failed"] += 1
            report_problems(self.device, FORMAT, [str(e)], log)
            return []
        self.stats["reports"] += 1
        report = parse(answer.text)
        if report.problems:  # one problem per poll, the first line not read as its example
            report_problems(self.device, FORMAT, [f"{len(report.problems)} part(s) of the {answer.format} report "
                                                  f"not read, e.g. {report.problems[0]}"], log)
        if report.troubled or self.troubled:
            self.emit(event(report, self.device, now(), job=c.job))
            self.stats["posted"] += 1
        self.troubled = report.troubled
        return []
