"""POST /v1/ingest/{samples,steps,collectives,events,collective_summaries} — the write side of docs/API.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from fabricscope.service.api.deps import IngestAuth, PoolDep, SettingsDep, WriterDep
from fabricscope.service.arrival import Arrivals
from fabricscope.service.ingest import store
from fabricscope.service.ingest import summaries as sm
from fabricscope.service.ingest import validate as v
from fabricscope.service.ingest.body import decode_body, inflate
from fabricscope.service.ingest.errors import IngestError, TooLarge
from fabricscope.service.ingest.fast import samples_json
from fabricscope.service.observability import metrics as m
from fabricscope.service.schemas import INGEST_MODELS, IngestResult
from fabricscope.service.settings import Settings

router = APIRouter(prefix="/v1/ingest", tags=["ingest"], dependencies=[IngestAuth])


def _body_doc(kind: str) -> dict[str, Any]:
    name = INGEST_MODELS[kind].__name__
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}}


async def _read_json(request: Request, max_bytes: int) -> Any:
    raw, gzipped = await _read_raw(request, max_bytes)
    return decode_body(raw, gzipped=gzipped, max_bytes=max_bytes)


async def _read_raw(request: Request, max_bytes: int) -> tuple[bytes, bool]:
    """The body as sent (within the size limit) and whether it is gzipped."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(["body"], f"body of {declared} bytes is over the limit of {max_bytes}", "too_long")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise TooLarge(["body"], f"body is over the limit of {max_bytes} bytes", "too_long")
        chunks.append(chunk)
    encoding = request.headers.get("content-encoding", "identity").lower()
    if encoding not in ("gzip", "identity", ""):
        raise IngestError(["header", "content-encoding"], "only gzip or identity are accepted", "value_error")
    return b"".join(chunks), encoding == "gzip"


async def _to_bus(request: Request, settings: Settings, kind: str, body: Any, n: int) -> dict[str, Any]:
    """ingest_mode=nats: the body is valid; publish it for `fabricscope writer` instead of writing."""
    from fabricscope.service.bus.api import publish_batch

    return await publish_batch(request.app, settings, kind, body, n)


def _limits(settings: SettingsDep) -> v.Limits:
    return v.Limits(settings.max_batch, settings.min_ts, time.time() + settings.max_future_s)


async def _strict(pool: PoolDep, settings: SettingsDep, sources: list[str], kind: str) -> None:
    if not settings.strict_sources or not sources:
        return

    def check() -> list[str]:
        with pool.connection() as conn:
            return store.unknown_devices(conn, sources=sources)

    unknown = await run_in_threadpool(check)
    if unknown:
        i = next(i for i, s in enumerate(sources) if s.partition(":")[0] == unknown[0])
        raise IngestError(["body", kind, i, "source"], f"unknown device '{unknown[0]}': declare it in the topology "
                          "first (PUT /v1/topology) or turn off FABRICSCOPE_STRICT_SOURCES", "unknown_source")


async def _finish(request: Request, pool: PoolDep, settings: SettingsDep, *, kind: str, body: Any, n: int,
                  t0: float, write: Callable[[psycopg.Connection], dict[str, Any]],
                  arrived: Callable[[Arrivals], None] | None = None) -> Any:
    """Publish (NATS mode) or write the validated batch, and count it. ``arrived``: what to tell the
    attribution worker once the batch is committed (a signal only: the work is on its thread)."""
    if settings.ingest_mode == "nats":
        return await _to_bus(request, settings, kind, body, n)

    def run() -> dict[str, Any]:
        with pool.connection() as conn:
            return write(conn)

    out = await run_in_threadpool(run)
    if arrived is not None and out.get("accepted") and not out.get("duplicate"):
        arrived(request.app.state.arrivals)
    m.INGEST_ROWS.labels(kind).inc(out["accepted"] if not out.get("duplicate") else 0)
    m.INGEST_SECONDS.labels(kind).observe(time.perf_counter() - t0)
    return out


def _route(kind: str, summary: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return router.post(f"/{kind}", response_model=IngestResult, response_model_exclude_none=True,
                       openapi_extra=_body_doc(kind), summary=summary)


@_route("samples", "Ingest counter and gauge samples")
async def ingest_samples(request: Request, pool: PoolDep, settings: SettingsDep, writer: WriterDep) -> Any:
    t0 = time.perf_counter()
    if settings.ingest_mode == "nats":  # the bus carries the body itself
        body = await _read_json(request, settings.max_body_bytes)
        cols = v.samples(body, _limits(settings))
        await _strict(pool, settings, sorted(set(cols.source)), "samples")
        return await _to_bus(request, settings, "samples", body, len(cols))
    raw, gzipped = await _read_raw(request, settings.max_body_bytes)
    cols, bid = samples_json(inflate(raw, gzipped=gzipped, max_bytes=settings.max_body_bytes), _limits(settings))
    await _strict(pool, settings, sorted(set(cols.source)), "samples")
    return await _finish(request, pool, settings, kind="samples", body=None, n=len(cols), t0=t0,
                         write=lambda conn: store.store_samples(conn, sample_writer=writer, batch_id=bid, cols=cols),
                         arrived=lambda a: a.telemetry(float(cols.ts.max())) if len(cols) else None)


async def _job_rows(request: Request, pool: PoolDep, settings: SettingsDep, kind: str,
                    validate: Callable[[Any, v.Limits], list[Any]], write_rows: Callable[..., Any]) -> Any:
    """Steps and collectives: rows of one job, validated, then stored (or answered as a duplicate)."""
    t0 = time.perf_counter()
    body = await _read_json(request, settings.max_body_bytes)
    rows = validate(body, _limits(settings))
    job = v.job_name(body)
    # New steps may complete one: the attribution worker judges it now, not on its next interval.
    # (A step's collectives are posted before it by the hook, so steps alone are the trigger.)
    arrived = (lambda a: a.steps(job, _latest_end(rows))) if kind == "steps" else None
    return await _finish(request, pool, settings, kind=kind, body=body, n=len(rows), t0=t0,
                         write=lambda conn: write_rows(conn, body=body, rows=rows), arrived=arrived)


def _latest_end(rows: list[tuple[Any, ...]]) -> float | None:
    """The latest end of step rows (rank, step, start, end, phases); None when none has one."""
    return max((r[3] for r in rows if r[3] is not None), default=None)


@_route("steps", "Ingest per-rank step timings of a job")
async def ingest_steps(request: Request, pool: PoolDep, settings: SettingsDep) -> Any:
    return await _job_rows(request, pool, settings, "steps", v.steps, store.store_steps)


@_route("collectives", "Ingest per-rank collective timings of a job")
async def ingest_collectives(request: Request, pool: PoolDep, settings: SettingsDep) -> Any:
    return await _job_rows(request, pool, settings, "collectives", v.collectives, store.store_collectives)


@_route("collective_summaries", "Ingest per-rank, per-step collective summaries of a job (bounded detail)")
async def ingest_collective_summaries(request: Request, pool: PoolDep, settings: SettingsDep) -> Any:
    return await _job_rows(request, pool, settings, sm.KIND, sm.summaries, store.store_summaries)


@_route("events", "Ingest events (checkpoint, pfc_storm, ecn_burst, link_flap, ...)")
async def ingest_events(request: Request, pool: PoolDep, settings: SettingsDep) -> Any:
    t0 = time.perf_counter()
    body = await _read_json(request, settings.max_body_bytes)
    rows = v.events(body, _limits(settings))
    await _strict(pool, settings, [r[1] for r in rows], "events")
    return await _finish(request, pool, settings, kind="events", body=body, n=len(rows), t0=t0,
                         write=lambda conn: store.store_events(conn, body=body, rows=rows))
