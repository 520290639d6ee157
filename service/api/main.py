"""The FastAPI application: routers, error mapping (4xx for bad input, 503 for outages), OpenAPI."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from prometheus_client import REGISTRY
from psycopg_pool import PoolTimeout, TooManyRequests

from fabricscope.service.api.admission import ReadGates
from fabricscope.service.api.limits import RequestGuard
from fabricscope.service.api.routes import (
    acceptance,
    alerts,
    efficiency,
    health,
    ingest,
    jobs,
    sources,
    steps,
    topology,
)
from fabricscope.service.api.routes import compare as compare_routes  # (#48)
from fabricscope.service.api.routes import detail as detail_routes  # (#45 item 3)
from fabricscope.service.api.routes import fleet as fleet_routes  # (#48)
from fabricscope.service.api.routes import hang as hang_routes  # (#45 item 4)
from fabricscope.service.api.routes import placement as placement_routes  # (#17 item 4)
from fabricscope.service.api.routes import trends as trends_routes  # (#19)
from fabricscope.service.arrival import Arrivals
from fabricscope.service.correlate import AttributionEngine, EngineConfig
from fabricscope.service.db.database import database_url, make_pool, pool_full
from fabricscope.service.db.writer import SampleWriter
from fabricscope.service.ingest.errors import IngestError
from fabricscope.service.observability import metrics as m
from fabricscope.service.observability.access import AccessLog
from fabricscope.service.observability.logs import request_id_var
from fabricscope.service.observability.queues import register_queue_depths
from fabricscope.service.schemas import INGEST_MODELS
from fabricscope.service.settings import Settings, get_settings

log = logging.getLogger("fabricscope.api")

_DB_DOWN = (psycopg.OperationalError, PoolTimeout, TooManyRequests, psycopg.errors.AdminShutdown)


def _flavour(url: str) -> tuple[str, str]:
    """The flavour's name ("timescaledb" or "postgresql") and its versions, for /readyz."""
    from fabricscope.service.db.flavour import current

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            f = current(conn)
            return f.name, f.describe()
    except psycopg.Error:
        return "unknown", "unknown"


def create_app(settings: Settings | None = None, *, background: bool = False,
               engine_config: EngineConfig | None = None) -> FastAPI:
    settings = settings or get_settings()
    # One engine per app, shared by request threads and the background scheduler (it is thread-safe).
    engine = AttributionEngine(engine_config or EngineConfig())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = database_url(settings)
        app.state.pool = make_pool(url, settings)
        # Threads for every request that may wait on the pool, and some for the routes that do not
        # (probes, /metrics): the pool's queue, not the thread pool, is what turns load into 429.
        anyio.to_thread.current_default_thread_limiter().total_tokens = max(
            40, settings.pool_size + settings.pool_max_waiting + 16)
        queue_depths = register_queue_depths(app.state.pool.connection)
        app.state.flavour, app.state.database = _flavour(url)
        log.info("database flavour: %s", app.state.database)
        workers = None
        if background:
            from fabricscope.service.workers import start_background

            workers = start_background(app.state.pool, settings, engine=engine, arrivals=app.state.arrivals)
        try:
            yield
        finally:
            if workers is not None:
                # a running job gets a grace period, then its statement is cancelled (#46 item 9)
                workers.shutdown(grace_s=settings.background_stop_grace_s)
            bus = getattr(app.state, "bus", None)  # the NATS publisher, created on first use
            if bus is not None:
                await bus.close()
            REGISTRY.unregister(queue_depths)
            app.state.pool.close()

    app = FastAPI(
        title="fabricscope",
        version="1.0.0",
        summary="Why was step N slow? Cross-layer telemetry correlation for AI training clusters.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.sample_writer = SampleWriter()
    app.state.engine = engine
    # what the ingest routes signal once a batch is committed; inert unless the background worker runs
    app.state.arrivals = Arrivals(margin_s=engine.config.window_pad_min_s)
    app.state.token_scopes = settings.token_scopes()
    app.state.reads = ReadGates(heavy=settings.max_heavy_reads, heavy_per_client=settings.max_heavy_reads_per_client,
                                cheap=settings.max_cheap_reads, cheap_per_client=settings.max_cheap_reads_per_client)
    routers = (health.router, ingest.router, topology.router, jobs.router, steps.router, sources.router,
               alerts.router,
               acceptance.router,  # #19: acceptance runs and baselines
               efficiency.router,  # #19: GET /v1/jobs/{job}/efficiency
               trends_routes.router,  # (#19)
               placement_routes.router,  # #17: GET /v1/jobs/{job}/placement
               fleet_routes.router,  # #48: GET /v1/fleet/...
               compare_routes.router,  # #48: GET /v1/jobs/{a}/compare/{b}
               hang_routes.router,  # #45: GET /v1/jobs/{job}/hang
               detail_routes.router)  # #45: GET/POST /v1/jobs/{job}/detail_requests
    for r in routers:
        app.include_router(r)
    # The routes as their routers declare them (FastAPI wraps included routers in private types):
    # RequestGuard matches a request against them for its scope, before the body (#46).
    declared = [route for r in routers for route in r.routes]

    app.add_middleware(RequestGuard, settings=settings, tokens=app.state.token_scopes, routes=declared)
    app.add_middleware(AccessLog)  # added before request_id below, so it runs inside it and logs the id

    @app.middleware("http")
    async def request_id(request: Request, call_next: Any) -> Any:
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex[:16]
        token = request_id_var.set(rid)
        try:
            response = await call_next(request)
        finally:
            request_id_var.reset(token)
        response.headers["X-Request-Id"] = rid
        return response

    @app.exception_handler(IngestError)
    async def ingest_error(_: Request, exc: IngestError) -> JSONResponse:
        m.INGEST_REJECTED.labels(str(exc.status_code)).inc()
        return JSONResponse({"detail": exc.detail()}, status_code=exc.status_code)

    async def db_down(request: Request, exc: Exception) -> JSONResponse:
        # Waiting out db_timeout_s with every connection in use (or the queue full) is load, not an outage.
        if isinstance(exc, TooManyRequests) or (isinstance(exc, PoolTimeout) and pool_full(request.app.state.pool)):
            m.BUSY_REJECTED.labels("pool").inc()
            return JSONResponse({"detail": "server busy: all database connections are in use, retry later"},
                                status_code=429, headers={"Retry-After": str(settings.busy_retry_after_s)})
        m.DB_UNAVAILABLE.inc()
        log.warning("database unavailable: %s", type(exc).__name__)
        return JSONResponse({"detail": "database unavailable, retry later"}, status_code=503,
                            headers={"Retry-After": str(settings.retry_after_s)})

    for exc_type in _DB_DOWN:
        app.add_exception_handler(exc_type, db_down)

    async def data_error(_: Request, exc: Exception) -> JSONResponse:
        # Values the database cannot hold (a number out of range, an invalid character, an index entry
        # over its size limit): the client's input, never an outage. ProgramLimitExceeded is an
        # OperationalError to psycopg; this more specific handler keeps it from the 503 above, which
        # senders retry forever. Validation (service.contract) refuses all such input earlier, naming the item.
        return JSONResponse({"detail": [{"loc": ["body"], "msg": f"value rejected by the database: "
                                         f"{str(exc).splitlines()[0]}", "type": "value_error"}]}, status_code=422)

    for data_exc in (psycopg.errors.DataError, psycopg.errors.ProgramLimitExceeded):
        app.add_exception_handler(data_exc, data_error)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        return JSONResponse({"detail": errors}, status_code=422)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in INGEST_MODELS.values():
            js = model.model_json_schema(ref_template="#/components/schemas/{model}")
            comps.update(js.pop("$defs", {}))
            comps[model.__name__] = js
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
