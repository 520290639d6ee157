"""Dependency aliases: routes declare what they need; none builds its own DB session."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any, cast

import psycopg
from fastapi import Depends, HTTPException, Request
from psycopg_pool import ConnectionPool

from fabricscope.core.errors import FabricscopeError
from fabricscope.service.api import admission
from fabricscope.service.api.admission import ReadGates
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


def _refusal_detail(gates: ReadGates, gate: admission.CostGate, settings: Settings, peer: str,
                    refusal: admission.Refusal) -> str:
    if gate is gates.cheap:
        shares = "cheap reads (one share each: a read by its key, a short list)"
        names = ("FABRICSCOPE_MAX_CHEAP_READS", settings.max_cheap_reads, "FABRICSCOPE_MAX_CHEAP_READS_PER_CLIENT",
                 settings.max_cheap_reads_per_client, "reads")
    else:
        shares = f"read shares ({admission.SHARES} shares a unit, an expensive read)"
        names = ("FABRICSCOPE_MAX_HEAVY_READS", settings.max_heavy_reads, "FABRICSCOPE_MAX_HEAVY_READS_PER_CLIENT",
                 settings.max_heavy_reads_per_client, "units")
    total, total_n, per, per_n, unit = names
    if refusal is admission.Refusal.CLIENT:
        return (f"this client already holds {gate.held_by(peer)} of the {gate.per_client} {shares} one client "
                f"may hold ({per}={per_n} {unit})")
    return f"reads held all {gate.capacity} {shares} ({total}={total_n} {unit}) for {settings.db_timeout_s:g} s"


@contextmanager
def admitted(request: Request, settings: Settings, *, cost: int, what: str) -> Iterator[None]:
    """Hold ``cost`` shares of the read gates (service/api/admission.py: a cheap read its own gate) for the
    block; 429 naming why when this client already holds its share, or no room frees within db_timeout_s."""
    gates: ReadGates = request.app.state.reads
    gate = gates.gate_for(cost)
    peer = _peer(request)
    refusal = gate.acquire(cost=cost, peer=peer, timeout_s=settings.db_timeout_s)
    if refusal is not None:
        m.BUSY_REJECTED.labels("heavy" if gate is gates.heavy else "cheap").inc()
        why = _refusal_detail(gates, gate, settings, peer, refusal)
        raise HTTPException(429, detail=f"server busy: {why}; asked {cost} for {what}, retry later",
                            headers={"Retry-After": str(settings.busy_retry_after_s)})
    try:
        yield
    finally:
        gate.release(cost=cost, peer=peer)


def admit(what: str, cost: Callable[[Request, ReadGates], int]) -> Callable[..., Iterator[None]]:
    """A read route's admission, by ``cost(request, gate)`` shares: in a route's ``dependencies``, so it
    is taken before the route's database connection (they resolve before its parameters) and held
    until the answer is written (answers waiting on clients that do not read stay bounded)."""

    def admission(request: Request, settings: SettingsDep) -> Iterator[None]:
        with admitted(request, settings, cost=cost(request, request.app.state.reads), what=what):
            yield
        rows = getattr(request.state, "answer_rows", None)
        if rows is not None:  # a list without a limit: what it answered is what the next one costs
            request.app.state.reads.learn(request.state.answer_key, rows)

    admission.fabricscope_admission = True  # type: ignore[attr-defined]  # tests/robustness/test_read_admission.py
    return admission


def _limit(request: Request, default: int, maximum: int) -> int:
    # The route validates the value (422); the cost is only taken from one it would accept.
    # ASCII digits only, and few: int() refuses '²' and strings over 4,300 digits (a 500 here).
    raw = request.query_params.get("limit", "")
    return min(max(int(raw), 1), maximum) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else default


def by_limit(default: int, maximum: int) -> Any:
    """Admission of a list by its ``limit`` query parameter: a share per admission.ROWS_PER_SHARE rows."""
    return Depends(admit(f"a list of up to 'limit' rows (default {default})",
                         lambda request, _: admission.rows_cost(_limit(request, default, maximum))))


def _learned(key: str) -> Callable[[Request, ReadGates], int]:
    def cost(request: Request, gate: ReadGates) -> int:
        # A filtered list is learned apart from the whole one: it is often far shorter.
        request.state.answer_key = f"{key}?" if request.query_params else key
        return gate.learned_cost(request.state.answer_key)

    return cost


def by_size(key: str) -> Any:
    """Admission of a list without a limit, by the rows of its last answer (the route calls answered())."""
    return Depends(admit(f"the whole {key} list", _learned(key)))


def answered(request: Request, rows: int) -> None:
    """What a list admitted by_size() answered: the cost of the next one."""
    request.state.answer_rows = rows


HeavyRead = Depends(admit("one expensive read", lambda _, __: admission.SHARES))
# One row, or the few of one job or run, found by their key.
CheapRead = Depends(admit("one read by its key", lambda _, __: admission.CHEAP))
IngestAuth = Depends(require("ingest"))
ReadAuth = Depends(require("read"))
AdminAuth = Depends(require("admin"))
