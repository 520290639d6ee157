"""GET /v1/sources and /v1/sources/{source}/metrics/{metric}: raw values and rates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import Response

from fabricscope.service import contract
from fabricscope.service.api.admission import CHEAP, series_cost
from fabricscope.service.api.deps import ConnDep, PoolDep, ReadAuth, SettingsDep, admitted, answered, by_size
from fabricscope.service.db import series as series_db

router = APIRouter(prefix="/v1/sources", tags=["queries"], dependencies=[ReadAuth])

# What ingest accepts, so a lookup never sends the database a value it refuses (a NUL: 422 "body").
_NO_NUL = contract.schema_pattern(contract.TEXT_BODY)


def _range(from_: datetime | None, to: datetime | None) -> tuple[datetime, datetime]:
    end = to or datetime.now(UTC)
    start = from_ or end - timedelta(hours=1)
    if start.tzinfo is None or end.tzinfo is None:
        field = "from" if start.tzinfo is None else "to"
        raise HTTPException(422, detail=[{"loc": ["query", field], "msg": "timestamp needs a time zone offset",
                                          "type": "timestamp_parsing"}])
    if end < start:
        raise HTTPException(422, detail=[{"loc": ["query", "to"], "msg": "'to' is before 'from'",
                                          "type": "value_error"}])
    return start, end


@router.get("", dependencies=[by_size("sources")], summary="Known sources, optionally filtered by device")
def list_sources(request: Request, conn: ConnDep,
                 device: Annotated[str | None, Query(max_length=256, pattern=_NO_NUL)] = None,
                 ) -> list[dict[str, Any]]:
    out = series_db.list_sources(conn, device=device)
    answered(request, len(out))
    return out


def metric_series(
    request: Request,
    source: Annotated[str, Path(max_length=contract.MAX_TEXT, pattern=_NO_NUL)],
    metric: Annotated[str, Path(max_length=contract.NAME_MAX_LEN, pattern=_NO_NUL)],
    pool: PoolDep,
    settings: SettingsDep,
) -> Iterator[list[tuple[int, dict[str, str]]]]:
    """The metric's series, the read admitted by their number (service/api/admission.py). Counted first,
    admitted as a cheap read on a connection given back at once: a read refused costs one count, not
    the series' labels. The admission is held until the answer is written, as the expensive reads'
    is, so answers waiting on clients that do not read stay bounded."""
    with admitted(request, settings, cost=CHEAP, what="a count of the metric's series"), pool.connection() as conn:
        n = series_db.count_series(conn, source=source, metric=metric)
    if n is None:
        raise HTTPException(404, detail=f"source '{source}' is unknown")
    if not n:
        raise HTTPException(404, detail=f"source '{source}' has no metric '{metric}'")
    cost = series_cost(n)
    with admitted(request, settings, cost=cost, what=f"{n} series"):
        with pool.connection() as conn:
            found = series_db.series_of(conn, source=source, metric=metric) or []
        yield found

metric_series.fabricscope_admission = True  # type: ignore[attr-defined]  # admitted inside, by its series


# Series read in one query each: a chunk's rows are held at once, a bounded number.
_CHUNK = 500


@router.get("/{source:path}/metrics/{metric}", response_model=dict[str, Any],
            summary="Values and rates of one metric of one source")
def get_metric(
    source: Annotated[str, Path(max_length=contract.MAX_TEXT, pattern=_NO_NUL)],
    metric: Annotated[str, Path(max_length=contract.NAME_MAX_LEN, pattern=_NO_NUL)],
    found: Annotated[list[tuple[int, dict[str, str]]], Depends(metric_series)],
    pool: PoolDep,
    from_: Annotated[datetime | None, Query(alias="from", description="Start (RFC 3339); default: to - 1h")] = None,
    to: Annotated[datetime | None, Query(description="End (RFC 3339); default: now")] = None,
    step: Annotated[float | None, Query(gt=0, le=86400 * 31, description="Bucket width in seconds")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> Response:
    start, end = _range(from_, to)
    parts: list[str] = []
    with pool.connection() as conn:
        for k in range(0, len(found), _CHUNK):
            chunk = found[k:k + _CHUNK]
            # Each series' points arrive encoded by the database (#46): the service only joins strings,
            # so a read of 100,000 points no longer holds the interpreter that every request shares.
            pts = series_db.points_json_of_many(conn, series_ids=[sid for sid, _ in chunk], start=start, end=end,
                                                step=step, limit=limit)
            parts.extend(f'{{"labels":{_dumps(labels)},"points":{pts.get(sid, "[]")}}}' for sid, labels in chunk)
    head = _dumps({"source": source, "metric": metric, "from": start.isoformat(), "to": end.isoformat(),
                   "step": step})
    return Response(f'{head[:-1]},"series":[{",".join(parts)}]}}'.encode(), media_type="application/json")


def _dumps(value: Any) -> str:
    """JSON as Starlette's JSONResponse writes it."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
