"""Liveness, readiness and the service's own Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg_pool import PoolTimeout, TooManyRequests

from fabricscope.service.api.deps import PoolDep
from fabricscope.service.db.database import current_revision, head_revision, pool_full

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: database reachable and migrations current")
def readyz(pool: PoolDep, request: Request) -> Any:
    try:
        with pool.connection(timeout=2) as conn:
            rev = current_revision(conn)
    except (PoolTimeout, TooManyRequests) as exc:
        if pool_full(pool):  # every connection in use: busy serving, not broken; a probe must not pull it out
            return {"status": "ready", "database": "busy", "flavour": request.app.state.flavour}
        return JSONResponse({"status": "unavailable", "database": type(exc).__name__}, status_code=503,
                            headers={"Retry-After": "5"})
    except Exception as exc:  # any failure to reach the DB means "not ready", never a 500
        return JSONResponse({"status": "unavailable", "database": type(exc).__name__}, status_code=503,
                            headers={"Retry-After": "5"})
    head = head_revision()
    if rev != head:
        return JSONResponse({"status": "migrations pending", "database_revision": rev, "expected": head},
                            status_code=503, headers={"Retry-After": "30"})
    return {"status": "ready", "database_revision": rev, "flavour": request.app.state.flavour,
            "database_version": request.app.state.database}


@router.get("/metrics", summary="Prometheus metrics of fabricscope itself")
def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
