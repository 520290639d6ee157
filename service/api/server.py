"""The HTTP server of `fabricscope serve`: uvicorn, with the deadlines and limits it lacks.

uvicorn (httptools) times out only idle keep-alive connections: a connection that sends nothing, or
its headers a byte at a time, stays open for good, and httptools buffers a header of any size
(100 MB of one header value took 200 MB). This protocol closes a connection whose request line and
headers have not arrived within FABRICSCOPE_HTTP_HEADER_TIMEOUT_S (408) or grow past
FABRICSCOPE_HTTP_MAX_HEADER_BYTES (431), and answers 429 over FABRICSCOPE_HTTP_MAX_CONNECTIONS
(uvicorn's own limit answers 503, which clients and probes read as an outage). The deadline for a
body is service/api/limits.py's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from fabricscope.service.observability import metrics as m
from fabricscope.service.settings import Settings


def _response(status: bytes, detail: str, extra: bytes = b"") -> bytes:
    body = json.dumps({"detail": [{"loc": ["header"], "msg": detail, "type": "value_error"}]}).encode()
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\nconnection: close\r\n" + extra + b"\r\n" + body)


class GuardedHttpTools(HttpToolsProtocol):
    header_timeout_s = 10.0
    max_header_bytes = 64 << 10
    max_connections = 512
    retry_after_s = 1

    # The header deadline runs from the connection's start, and again from the end of each response
    # (uvicorn's keep-alive timer is cancelled by the first byte of a new request, this one is not).
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._header_bytes = 0
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _refuse(self, raw: bytes) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(raw)
            self.transport.close()

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
            return
        if self._header_bytes == 0:  # an idle connection: nothing to answer
            self.transport.close()
            return
        self._refuse(_response(b"408 Request Timeout", f"the request headers did not arrive within "
                               f"{self.header_timeout_s:g} s (FABRICSCOPE_HTTP_HEADER_TIMEOUT_S)"))

    def data_received(self, data: bytes) -> None:
        waiting = self._header_timer is not None
        if waiting:
            self._header_bytes += len(data)
        super().data_received(data)
        # Still no complete headers after this much: refuse before httptools buffers more.
        if waiting and self._header_timer is not None and self._header_bytes > self.max_header_bytes:
            self._refuse(_response(b"431 Request Header Fields Too Large", f"the request line and headers "
                                   f"are over {self.max_header_bytes} bytes (FABRICSCOPE_HTTP_MAX_HEADER_BYTES)"))

    def on_headers_complete(self) -> None:
        self._disarm()
        if len(self.connections) <= self.max_connections and len(self.tasks) < self.max_connections:
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

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


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
        "max_connections": settings.http_max_connections, "retry_after_s": settings.busy_retry_after_s})


def make_server(app: Any, settings: Settings, *, host: str, port: int) -> uvicorn.Server:
    """The server `serve` and `demo` both run: same deadlines, limits and graceful-stop time."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            http=protocol_for(settings), timeout_keep_alive=settings.http_keep_alive_s,
                            backlog=settings.http_backlog,
                            timeout_graceful_shutdown=settings.http_shutdown_timeout_s)
    return uvicorn.Server(config)


def run(app: Any, settings: Settings, *, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM; requests in flight get http_shutdown_timeout_s to finish."""
    make_server(app, settings, host=host, port=port).run()
