"""Gzip request bodies for every route (docs/API.md: gzip request bodies accepted).

The ingest routes stream and decompress bodies themselves (with their own limits and 4xx answers);
this ASGI middleware does the same for the other JSON routes (topology, jobs, webhooks).
"""

from __future__ import annotations

import json
import zlib
from typing import Any

Scope = dict[str, Any]


class GzipRequestMiddleware:
    def __init__(self, app: Any, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/v1/ingest/"):
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        if not any(k == b"content-encoding" and v.strip().lower() == b"gzip" for k, v in headers):
            await self.app(scope, receive, send)
            return
        raw = b""
        more = True
        while more:
            msg = await receive()
            raw += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(raw) > self.max_bytes:
                await _error(send, 413, "body is over the size limit")
                return
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            body = d.decompress(raw, self.max_bytes)
        except zlib.error:
            await _error(send, 422, "Content-Encoding is gzip but the body is not valid gzip")
            return
        if d.unconsumed_tail:
            await _error(send, 413, "decompressed body is over the size limit")
            return
        new_headers = [(k, v) for k, v in headers if k not in (b"content-encoding", b"content-length")]
        new_headers.append((b"content-length", str(len(body)).encode()))
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app({**scope, "headers": new_headers}, replay, send)


async def _error(send: Any, status: int, msg: str) -> None:
    body = json.dumps({"detail": [{"loc": ["body"], "msg": msg, "type": "value_error"}]}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
