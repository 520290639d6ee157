"""Access log and per-route HTTP metrics, as a plain ASGI middleware (no body buffering).

One log line per request at INFO on `fabricscope.access` (JSON with the request id when
FABRICSCOPE_LOG_JSON=true): method, route template, status, duration. The route template (not
the raw path) labels the metrics, so a job or source name never becomes a label value.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fabricscope.service.observability import metrics as m

log = logging.getLogger("fabricscope.access")
QUIET = {"/healthz", "/readyz", "/metrics"}  # probes and scrapes: counted, not logged


def _route(scope: dict[str, Any]) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"


class AccessLog:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500  # what the client sees if the app dies before answering

        async def send_wrapper(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            dt = time.perf_counter() - t0
            route, method = _route(scope), scope.get("method", "")
            m.HTTP_REQUESTS.labels(method, route, str(status)).inc()
            m.HTTP_SECONDS.labels(method, route).observe(dt)
            if scope.get("path") not in QUIET or status >= 400:
                log.info("%s %s %d %.1fms", method, route, status, dt * 1000,
                         extra={"http": {"method": method, "route": route, "status": status,
                                         "duration_ms": round(dt * 1000, 2)}})
