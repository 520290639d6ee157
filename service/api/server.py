"""The HTTP server of `fabricscope serve`: uvicorn, with the deadlines and limits it lacks.

uvicorn (httptools) times out only idle keep-alive connections: a connection that sends nothing, or
its headers a byte at a time, stays open for good, and httptools buffers a header of any size
(100 MB of one header value took 200 MB). This protocol closes a connection whose request line and
headers have not arrived within FABRICSCOPE_HTTP_HEADER_TIMEOUT_S (408) or grow past
FABRICSCOPE_HTTP_MAX_HEADER_BYTES (431), and answers 429 over FABRICSCOPE_HTTP_MAX_CONNECTIONS
(uvicorn's own limit answers 503, which clients and probes read as an outage). The deadline for a
body is service/api/limits.py's.

Fairness per client (#46; a client is its peer address): at most FABRICSCOPE_HTTP_MAX_CONNECTIONS_PER_CLIENT
connections each; once the server holds more than FABRICSCOPE_HTTP_IDLE_PRESSURE of its connections,
each new connection closes the oldest idle one of the client holding the most, so idle sockets can
never lock others out; a response the client stops reading for FABRICSCOPE_HTTP_WRITE_TIMEOUT_S is
aborted, which ends the request and frees what it holds (its expensive-read slot, its database connection).

A connection over its client's limit is *held* while the client's own connections are mute (opened,
never a byte sent): it is not counted, not parsed, and costs a socket and a timer. It takes a mute one's
place once it sends its request, or is closed silently at the header deadline like any mute one. Closing a
mute connection to make room for another mute one (until #46's soak) let an idle flood that reopens
what is closed make the server accept and close ~800 connections a second; held, each of the flood's
sockets lives its header deadline, and the accepts fall to its sockets / FABRICSCOPE_HTTP_HEADER_TIMEOUT_S.
At most FABRICSCOPE_HTTP_MAX_CONNECTIONS are held; over it a mute newcomer is closed at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from collections import Counter
from typing import Any

import uvicorn
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from fabricscope.service.observability import metrics as m
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.api.server")


# uvicorn's connection_made asks the socket for both addresses again (getsockname, getpeername), which
# asyncio's transport already holds (from accept and its own start). Under the idle flood of #46's
# soak (300-760 new connections a second) those two calls were 80% of connection_made and a fifth of
# the event loop's samples, and every request waits on the event loop: the cached ones serve the same.
def _address(info: Any) -> tuple[str, int] | None:
    return (str(info[0]), int(info[1])) if isinstance(info, tuple) and len(info) >= 2 else None


def _local_addr(transport: asyncio.BaseTransport) -> tuple[str, int | None] | None:
    info = transport.get_extra_info("sockname")
    return (info, None) if isinstance(info, str) else _address(info)  # str: a Unix socket's path


def _remote_addr(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    return _address(transport.get_extra_info("peername"))


httptools_impl.get_local_addr = _local_addr
httptools_impl.get_remote_addr = _remote_addr

def _response(status: bytes, detail: str, extra: bytes = b"") -> bytes:
    body = json.dumps({"detail": [{"loc": ["header"], "msg": detail, "type": "value_error"}]}).encode()
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\nconnection: close\r\n" + extra + b"\r\n" + body)


class Peers:
    """One server's connections by client: how many each holds (held ones apart), and the idle ones, oldest
    idle first."""

    def __init__(self) -> None:
        self.open: Counter[str] = Counter()
        self.idle: dict[GuardedHttpTools, None] = {}  # insertion order: the order they went idle
        self.held: dict[GuardedHttpTools, None] = {}  # over their client's limit, waiting (module docstring)
        self.held_of: Counter[str] = Counter()

    def counted(self, peer: str) -> int:
        return self.open[peer] - self.held_of[peer]

    def oldest_idle(self, peer: str | None, *, besides: GuardedHttpTools,
                    spoken: bool = False) -> GuardedHttpTools | None:
        """The longest idle connection of ``peer`` (None: of the client holding the most connections), held
        ones aside; ``spoken``: only one that has served a request (a keep-alive connection)."""
        if peer is None:
            busiest = max((c._peer for c in self.idle if c is not besides), key=self.open.__getitem__, default=None)
            if busiest is None:
                return None
            peer = busiest
        return next((c for c in self.idle if c._peer == peer and c is not besides and c not in self.held
                     and (c._spoken or not spoken)), None)

    def hold(self, conn: GuardedHttpTools) -> None:
        self.held[conn] = None
        self.held_of[conn._peer] += 1

    def unhold(self, conn: GuardedHttpTools) -> None:
        if self.held.pop(conn, False) is None:
            self.held_of[conn._peer] -= 1
            if self.held_of[conn._peer] <= 0:
                del self.held_of[conn._peer]


class GuardedHttpTools(HttpToolsProtocol):
    header_timeout_s = 10.0
    max_header_bytes = 64 << 10
    max_connections = 512
    max_per_client = 128
    idle_pressure = 0.75
    write_timeout_s = 10.0
    retry_after_s = 1
    peers = Peers()  # protocol_for gives each server its own

    # The header deadline runs from the connection's start, and again from the end of each response
    # (uvicorn's keep-alive timer is cancelled by the first byte of a new request, this one is not).
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._peer = self.client[0] if self.client else ""
        self._spoken = False
        self.peers.open[self._peer] += 1
        self._arm()
        self._make_room()

    def _counted_connections(self) -> int:
        return len(self.connections) - len(self.peers.held)

    def _make_room(self) -> None:
        """Make room for this new connection: close its client's oldest keep-alive connection, or hold this one
        while the client's are mute (module docstring); then the busiest client's oldest idle one under pressure."""
        if self.peers.counted(self._peer) > self.max_per_client:
            victim = self.peers.oldest_idle(self._peer, besides=self, spoken=True)
            if victim is not None:
                victim._close_idle()
            elif self.peers.oldest_idle(self._peer, besides=self) is None:
                self._refuse_busy()  # every one of this client's connections is working: this one waits its turn
                return
            elif len(self.peers.held) < self.max_connections:
                self.peers.hold(self)
                return
            else:
                m.BUSY_REJECTED.labels("idle_closed").inc()
                self.peers.idle.pop(self, None)
                self._disarm()
                self.transport.abort()  # mute, over every limit: nothing to answer, no FIN handshake to wait for
                return
        if self._counted_connections() > self.max_connections * self.idle_pressure:
            victim = self.peers.oldest_idle(None, besides=self)
            if victim is not None:
                victim._close_idle()

    def _refuse_busy(self) -> None:
        m.BUSY_REJECTED.labels("client_connections").inc()
        self._refuse(_busy_response(self.retry_after_s, f"this client already holds {self.max_per_client} "
                                    "connections (FABRICSCOPE_HTTP_MAX_CONNECTIONS_PER_CLIENT), retry later"))

    def _speak(self) -> bool:
        """The first bytes of a connection: a held one takes the place of its client's oldest idle one (or is
        told 429 when all of them are working); False when it was refused."""
        self._spoken = True
        if self not in self.peers.held:
            return True
        self.peers.unhold(self)
        if self.peers.counted(self._peer) > self.max_per_client:
            victim = self.peers.oldest_idle(self._peer, besides=self)
            if victim is None:
                self._refuse_busy()
                return False
            victim._close_idle()
        return True

    def _close_idle(self) -> None:
        m.BUSY_REJECTED.labels("idle_closed").inc()
        self.peers.idle.pop(self, None)
        self._disarm()
        self.transport.close()

    def _arm(self) -> None:
        self._header_bytes = 0
        self._tail = b""
        self.peers.idle[self] = None  # idle until the first byte of a request
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _refuse(self, raw: bytes) -> None:
        self._disarm()
        self.peers.idle.pop(self, None)
        if not self.transport.is_closing():
            self.transport.write(raw)
            self.transport.close()

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
            return
        if self._header_bytes == 0:  # an idle connection: nothing to answer
            self.peers.idle.pop(self, None)
            self.transport.close()
            return
        self._refuse(_response(b"408 Request Timeout", f"the request headers did not arrive within "
                               f"{self.header_timeout_s:g} s (FABRICSCOPE_HTTP_HEADER_TIMEOUT_S)"))

    def data_received(self, data: bytes) -> None:
        if not self._spoken and data and not self._speak():
            return
        if self._header_timer is not None and data:
            self.peers.idle.pop(self, None)
            # Count the request line and headers only, to their blank line: a request whose headers
            # end inside this chunk is measured too, and refused before httptools parses them.
            seen = self._tail + data
            end = seen.find(b"\r\n\r\n")
            self._header_bytes += len(data) if end < 0 else end + 4 - len(self._tail)
            self._tail = seen[-3:]
            if self._header_bytes > self.max_header_bytes:
                self._refuse(_response(b"431 Request Header Fields Too Large", f"the request line and headers "
                                       f"are over {self.max_header_bytes} bytes (FABRICSCOPE_HTTP_MAX_HEADER_BYTES)"))
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._disarm()
        if self._counted_connections() <= self.max_connections and len(self.tasks) < self.max_connections:
            super().on_headers_complete()
            return
        # Busy, not broken: the same 429 + Retry-After as a full database pool (service/api/main.py).
        m.BUSY_REJECTED.labels("connections").inc()
        app, self.app = self.app, _too_busy(self.retry_after_s)
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle.response_complete and self._header_timer is None:
            self._arm()

    # The write deadline: uvicorn waits for a paused transport without limit, holding the request's task.
    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout_s, self._write_late)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_late(self) -> None:
        self._write_timer = None
        m.BUSY_REJECTED.labels("write_timeout").inc()
        log.info("client %s read nothing of its answer for %g s (FABRICSCOPE_HTTP_WRITE_TIMEOUT_S): connection "
                 "aborted", self._peer, self.write_timeout_s)
        self.transport.abort()  # connection_lost follows: uvicorn resumes the paused send, the request ends

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        self.peers.idle.pop(self, None)
        self.peers.unhold(self)
        self.peers.open[self._peer] -= 1
        if self.peers.open[self._peer] <= 0:
            del self.peers.open[self._peer]
        super().connection_lost(exc)


def _busy_response(retry_after_s: int, detail: str) -> bytes:
    body = json.dumps({"detail": f"server busy: {detail}"}).encode()
    return (b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\nretry-after: " + str(retry_after_s).encode()
            + b"\r\nconnection: close\r\n\r\n" + body)


def _too_busy(retry_after_s: int) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = json.dumps({"detail": "server busy: too many connections, retry later"}).encode()
        await send({"type": "http.response.start", "status": 429, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(retry_after_s).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    return app


def protocol_for(settings: Settings) -> type[GuardedHttpTools]:
    return type("GuardedHttpTools", (GuardedHttpTools,), {
        "header_timeout_s": settings.http_header_timeout_s, "max_header_bytes": settings.http_max_header_bytes,
        "max_connections": settings.http_max_connections, "retry_after_s": settings.busy_retry_after_s,
        "max_per_client": settings.http_max_connections_per_client, "idle_pressure": settings.http_idle_pressure,
        "write_timeout_s": settings.http_write_timeout_s, "peers": Peers()})


def _enough_descriptors(settings: Settings) -> None:
    """Raise the soft limit on open files to what the connections may take: the counted ones, as many held
    (module docstring), the database pool and some to spare; never past the hard limit."""
    want = 2 * settings.http_max_connections + settings.pool_size + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < want:
            log.warning("open files limited to %d (hard limit): %d connections and as many held need about %d",
                        new, settings.http_max_connections, want)


def make_server(app: Any, settings: Settings, *, host: str, port: int) -> uvicorn.Server:
    """The server `serve` and `demo` both run: same deadlines, limits and graceful-stop time."""
    _enough_descriptors(settings)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            http=protocol_for(settings), timeout_keep_alive=settings.http_keep_alive_s,
                            backlog=settings.http_backlog,
                            timeout_graceful_shutdown=settings.http_shutdown_timeout_s)
    return uvicorn.Server(config)


def run(app: Any, settings: Settings, *, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM; requests in flight get http_shutdown_timeout_s to finish."""
    make_server(app, settings, host=host, port=port).run()
