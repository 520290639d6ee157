"""Dependency aliases: routes declare what they need; none builds its own DB session."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, cast

import psycopg
from fastapi import Depends, HTTPException, Request
from psycopg_pool import ConnectionPool

from fabricscope.core.errors import FabricscopeError
from fabricscope.service.api.admission import CostGate
from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.db.writer import SampleWriter
from fabricscope.service.observability import metrics as m
from fabricscope.service.settings import Settings


# What create_app puts on app.state, read back typed (the app owns one of each).
def get_settings(request: Request) -> Settings:
    return cast(Settings, request.app.state.settings)


def get_pool(request: Request) -> ConnectionPool:
    return cast(ConnectionPool, request.app.state.pool)


def get_conn(pool: Annotated[ConnectionPool, Depends(get_pool)]) -> Iterator[psycopg.Connection]:
    with pool.connection() as conn:
        yield conn


def get_sample_writer(request: Request) -> SampleWriter:
    return cast(SampleWriter, request.app.state.sample_writer)


def get_engine(request: Request) -> AttributionEngine:
    return cast(AttributionEngine, request.app.state.engine)


SettingsDep = Annotated[Settings, Depends(get_settings)]
PoolDep = Annotated[ConnectionPool, Depends(get_pool)]
ConnDep = Annotated[psycopg.Connection, Depends(get_conn)]
WriterDep = Annotated[SampleWriter, Depends(get_sample_writer)]
EngineDep = Annotated[AttributionEngine, Depends(get_engine)]


class Unauthenticated(FabricscopeError):
    """No bearer token, or one that is not configured: 401 (the message says which)."""


def authenticate(tokens: Mapping[str, frozenset[str]], authorization: str) -> frozenset[str]:
    """The scopes of the bearer token in an Authorization header value."""
    kind, _, token = authorization.partition(" ")
    if kind.lower() != "bearer" or not token:
        raise Unauthenticated("missing bearer token (Authorization: Bearer <token>)")
    for known, scopes in tokens.items():
        if hmac.compare_digest(known.encode(), token.encode()):
            return scopes
    raise Unauthenticated("unknown bearer token")


def require(scope: str) -> Callable[..., None]:
    """Bearer-token check for one scope; a no-op when no tokens are configured."""

    def check(request: Request, settings: SettingsDep) -> None:
        tokens = request.app.state.token_scopes
        if not tokens:
            return
        try:
            scopes = authenticate(tokens, request.headers.get("authorization", ""))
        except Unauthenticated as exc:
            raise HTTPException(401, detail=str(exc), headers={"WWW-Authenticate": "Bearer"}) from exc
        if scope not in scopes and "admin" not in scopes:
            raise HTTPException(403, detail=f"token lacks the '{scope}' scope")

    check.fabricscope_scope = scope  # type: ignore[attr-defined]  # read by limits.route_scopes, before the body
    return check


def _peer(request: Request) -> str:
    return request.client.host if request.client else ""


@contextmanager
def admitted(request: Request, settings: Settings, *, cost: int, what: str) -> Iterator[None]:
    """Hold ``cost`` units of the expensive-read gate (service/api/admission.py) for the block; 429 when
    this client already holds its share, or no room frees within db_timeout_s."""
    gate: CostGate = request.app.state.heavy_reads
    peer = _peer(request)
    if not gate.acquire(cost=cost, peer=peer, timeout_s=settings.db_timeout_s):
        m.BUSY_REJECTED.labels("heavy").inc()
        raise HTTPException(429, detail=f"server busy: {settings.max_heavy_reads} expensive reads (reports, steps, "
                            f"efficiency, trends, metrics over many series) already run, or this client runs its "
                            f"{settings.max_heavy_reads_per_client} (asked: {what}), retry later",
                            headers={"Retry-After": str(settings.busy_retry_after_s)})
    try:
        yield
    finally:
        gate.release(cost=cost, peer=peer)


def heavy_read(request: Request, settings: SettingsDep) -> Iterator[None]:
    """Admission for the expensive reads (one unit): taken before their database connection (a route's
    `dependencies` resolve before its parameters), released when the request ends."""
    with admitted(request, settings, cost=1, what="one expensive read"):
        yield


IngestAuth = Depends(require("ingest"))
HeavyRead = Depends(heavy_read)
ReadAuth = Depends(require("read"))
AdminAuth = Depends(require("admin"))
