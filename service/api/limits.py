"""What every request with a body passes before a route sees it (docs/security.md "Limits and timeouts").

In this order: a known bearer token when tokens are configured (401), with the scope the matched
route requires (403: the cheapest check first, #46), a declared Content-Length
within FABRICSCOPE_MAX_BODY_BYTES (413), a JSON media type (415), then the body itself, read within
FABRICSCOPE_HTTP_BODY_TIMEOUT_S (408) and the size limit (413), gzip inflated chunk by chunk on the
routes other than ingest. Each refusal closes the connection: the rest of the body is never read.

Why here and not in the routes: FastAPI reads and parses a body parameter before it runs the
route's dependencies (the token check among them), and uvicorn has no deadline for a request body.
The route checks the token and its scope again (for the requests without a body, which skip this).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from starlette.routing import BaseRoute, Match

from fabricscope.core.errors import FabricscopeError
from fabricscope.service.api.deps import Unauthenticated, authenticate
from fabricscope.service.api.gzip_body import BadGzip, BodyTooLarge, GzipInflater
from fabricscope.service.settings import Settings

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Refused(FabricscopeError):
    """A request answered here, before any route; ``detail`` as the API writes it."""

    def __init__(self, status: int, detail: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(status)
        self.status, self.detail, self.headers = status, detail, headers or []

    @classmethod
    def field(cls, status: int, loc: list[str], msg: str, kind: str) -> Refused:
        return cls(status, [{"loc": loc, "msg": msg, "type": kind}])

    async def send(self, send: Send) -> None:
        body = json.dumps({"detail": self.detail}).encode()
        await send({"type": "http.response.start", "status": self.status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"), *self.headers]})
        await send({"type": "http.response.body", "body": body})


class ClientGone(FabricscopeError):
    """The client disconnected while sending its body: there is no one to answer."""


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _scopes_of(dependant: Any) -> set[str]:
    """The scopes that `deps.require` checks anywhere among a route's dependencies (router-level included)."""
    found = {getattr(dependant.call, "fabricscope_scope", None)} - {None}
    for sub in dependant.dependencies:
        found |= _scopes_of(sub)
    return found  # type: ignore[return-value]


def route_scopes(routes: Iterable[BaseRoute], scope: Scope) -> frozenset[str]:
    """The scopes the route matching this request requires; empty when none matches fully."""
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            dependant = getattr(route, "dependant", None)
            return frozenset(_scopes_of(dependant)) if dependant is not None else frozenset()
    return frozenset()


class RequestGuard:
    def __init__(self, app: Any, *, settings: Settings, tokens: Mapping[str, frozenset[str]],
                 routes: Iterable[BaseRoute] = ()) -> None:
        self.app = app
        self.max_bytes = settings.max_body_bytes
        self.timeout_s = settings.http_body_timeout_s
        self.tokens = tokens
        self.routes = list(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", [])) if scope["type"] == "http" else {}
        declared = headers.get(b"content-length", b"").strip()
        if scope["type"] != "http" or (b"transfer-encoding" not in headers and declared in (b"", b"0")):
            await self.app(scope, receive, send)  # no body: the routes' own checks suffice
            return
        gzipped = headers.get(b"content-encoding", b"").strip().lower() == b"gzip"
        # Ingest decompresses its bodies itself (service/ingest/body.py), in both ingest modes.
        inflate = gzipped and not scope["path"].startswith("/v1/ingest/")
        try:
            self._check_headers(headers, declared, scope)
            body = await self._read(receive, GzipInflater(self.max_bytes) if inflate else None)
        except Refused as refused:
            await refused.send(send)
            return
        except ClientGone:
            return
        if inflate:
            drop = (b"content-encoding", b"content-length", b"transfer-encoding")
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k not in drop]
                     + [(b"content-length", str(len(body)).encode())]}
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:  # later calls wait for the disconnect, as the server's receive does
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _check_headers(self, headers: Mapping[bytes, bytes], declared: bytes, scope: Scope) -> None:
        if self.tokens:
            try:
                held = authenticate(self.tokens, headers.get(b"authorization", b"").decode("latin-1"))
            except Unauthenticated as exc:
                raise Refused(401, str(exc), [(b"www-authenticate", b"Bearer")]) from exc
            # The route's scope before any byte of the body is read (deps.require says the same later).
            missing = sorted(route_scopes(self.routes, scope) - held) if "admin" not in held else []
            if missing:
                raise Refused(403, f"token lacks the '{missing[0]}' scope")
        if declared and not declared.isdigit():
            raise Refused.field(400, ["header", "content-length"], "Content-Length is not a number of bytes",
                                "value_error")
        if declared and int(declared) > self.max_bytes:
            raise Refused.field(413, ["header", "content-length"], f"body of {int(declared)} bytes is over the "
                                f"limit of {self.max_bytes}", "too_long")
        content_type = headers.get(b"content-type", b"")
        if not _is_json(content_type):
            got = f"'{content_type.decode('latin-1')[:60]}'" if content_type else "none"
            raise Refused.field(415, ["header", "content-type"], "request bodies are JSON: send Content-Type: "
                                f"application/json (gzip them with Content-Encoding: gzip), got {got}",
                                "unsupported_media_type")

    async def _read(self, receive: Receive, inflater: GzipInflater | None) -> bytes:
        parts: list[bytes] = []
        size = 0
        more = True
        try:
            async with asyncio.timeout(self.timeout_s):
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise ClientGone
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise Refused.field(413, ["body"], f"body is over the limit of {self.max_bytes} bytes",
                                            "too_long")
                    if inflater is not None:
                        inflater.feed(chunk)
                    else:
                        parts.append(chunk)
                    more = message.get("more_body", False)
        except TimeoutError as exc:
            raise Refused.field(408, ["body"], f"the body did not arrive within {self.timeout_s:g} s "
                                "(FABRICSCOPE_HTTP_BODY_TIMEOUT_S)", "timeout") from exc
        except BodyTooLarge as exc:
            raise Refused.field(413, ["body"], str(exc), "too_long") from exc
        except BadGzip as exc:
            raise Refused.field(422, ["body"], str(exc), "value_error") from exc
        if inflater is None:
            return b"".join(parts)
        try:
            return inflater.finish()
        except BadGzip as exc:
            raise Refused.field(422, ["body"], str(exc), "value_error") from exc
