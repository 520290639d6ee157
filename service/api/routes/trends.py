"""GET /v1/trends and /v1/trends/annotations: capacity trends across jobs (service/trends)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request

from fabricscope.service import contract
from fabricscope.service.api.deps import ConnDep, HeavyRead, ReadAuth, SettingsDep
from fabricscope.service.settings import Settings
from fabricscope.service.trends import annotations as ann
from fabricscope.service.trends.queries import ROLLUP_S, Metric, TrendQuery, jobs_in_scope, trend

router = APIRouter(prefix="/v1/trends", tags=["trends"], dependencies=[ReadAuth])

DEFAULT_SPAN = timedelta(days=7)
DEFAULT_BUCKETS = 200  # what a default step aims at
LABEL_VALUE_MAX = 256
MAX_TS = 7_258_118_400.0  # 2200-01-01: far enough for a bucket arithmetic that never overflows
UNITS = {"comm_fraction": "fraction", "exposed_comm_fraction": "fraction", "busbw_fraction": "fraction",
         "collective_p50_s": "s", "collective_p99_s": "s", "collective_p999_s": "s"}

JobQ = Annotated[str | None, Query(min_length=1, max_length=512, description="One job only")]
ByQ = Annotated[str | None, Query(pattern=contract.schema_pattern(contract.LABEL_KEY_BODY),
                                  description="Group by this job label (default: each job is a group)")]
FromQ = Annotated[datetime | None, Query(alias="from", description="RFC 3339; default: `to` minus 7 days")]
ToQ = Annotated[datetime | None, Query(description="RFC 3339; default: now")]
StepQ = Annotated[int | None, Query(ge=ROLLUP_S, le=366 * 86400,
                                    description="Bucket seconds, a multiple of 3600 (default: about 200 buckets)")]


def _bad(field: str, msg: str) -> HTTPException:
    return HTTPException(422, detail=[{"loc": ["query", field], "msg": msg, "type": "value_error"}])


def _labels(request: Request) -> dict[str, str]:
    """``label.<key>=<value>`` parameters: the jobs must carry every one of them."""
    out: dict[str, str] = {}
    for k, v in request.query_params.multi_items():
        if not k.startswith("label."):
            continue
        key = k[len("label."):]
        if not contract.LABEL_KEY.fullmatch(key):
            raise _bad(k, "label key must match " + contract.LABEL_KEY_BODY)
        if key in out:
            raise _bad(k, "label given twice")
        if not v or len(v) > LABEL_VALUE_MAX:
            raise _bad(k, f"label value must be 1 to {LABEL_VALUE_MAX} characters")
        out[key] = v
    return out


def _window(from_: datetime | None, to: datetime | None, step: int | None,
            settings: Settings) -> tuple[datetime, datetime, int]:
    for name, v in (("from", from_), ("to", to)):
        if v is not None and v.tzinfo is None:
            raise _bad(name, "timestamp needs a time zone offset")
        if v is not None and not contract.MIN_TS <= v.timestamp() <= MAX_TS:
            raise _bad(name, "timestamp out of range (2000 to 2200)")
    to = to or datetime.now(UTC)
    from_ = from_ or to - DEFAULT_SPAN
    if to <= from_:
        raise _bad("to", "must be after from")
    epoch = from_.timestamp()
    start = datetime.fromtimestamp(epoch - epoch % ROLLUP_S, UTC)  # the rollup's hours
    span = (to - start).total_seconds()
    if step is None:
        step = max(1, math.ceil(span / min(DEFAULT_BUCKETS, settings.trends_max_points) / ROLLUP_S)) * ROLLUP_S
    elif step % ROLLUP_S:
        raise _bad("step", f"must be a multiple of {ROLLUP_S} s (the rollup's hour)")
    buckets = math.ceil(span / step)
    if buckets > settings.trends_max_points:
        least = math.ceil(span / settings.trends_max_points / ROLLUP_S) * ROLLUP_S
        raise _bad("step", f"too small for the range: {buckets} buckets, at most {settings.trends_max_points}; "
                           f"use step >= {least}")
    return start, to, step


@router.get("", dependencies=[HeavyRead],
            summary="Comm fraction, exposed comm, collective tails and busbw fraction over time")
def get_trends(
    request: Request,
    conn: ConnDep,
    settings: SettingsDep,
    metric: Annotated[Metric, Query(description="What to track")],
    job: JobQ = None,
    by: ByQ = None,
    from_: FromQ = None,
    to: ToQ = None,
    step: StepQ = None,
    op: Annotated[str | None, Query(min_length=1, max_length=64, description="Collective metrics: one op")] = None,
    bucket: Annotated[int | None, Query(ge=1, le=2**62, description="Collective metrics: one size bucket")] = None,
) -> dict[str, Any]:
    labels = _labels(request)
    start, end, step_s = _window(from_, to, step, settings)
    q = TrendQuery(metric=metric, from_ts=start, to_ts=end, step_s=step_s, job=job, labels=labels, by=by, op=op,
                   bucket=bucket)
    out = trend(conn, query=q, max_series=settings.trends_max_series)
    return {"metric": metric, "unit": UNITS[metric], "by": by, "job": job, "labels": labels,
            "from": start, "to": end, "step": step_s, **out}


@router.get("/annotations", dependencies=[HeavyRead],
            summary="Version changes between jobs and jumps in comm fraction")
def get_annotations(
    request: Request,
    conn: ConnDep,
    settings: SettingsDep,
    job: JobQ = None,
    by: ByQ = None,
    from_: FromQ = None,
    to: ToQ = None,
    step: StepQ = None,
) -> dict[str, Any]:
    labels = _labels(request)
    start, end, step_s = _window(from_, to, step, settings)
    jobs = jobs_in_scope(conn, job=job, labels=labels, by=by)
    if by is None:  # without a grouping label the chosen jobs are one line of succession
        jobs = [{**j, "grp": None} for j in jobs]
    found = [a for a in ann.version_changes(jobs) if start <= a["ts"] < end]
    # the trailing median needs the buckets before `from` too
    lead = timedelta(seconds=step_s * settings.trends_jump_window)
    q = TrendQuery(metric="comm_fraction", from_ts=start - lead, to_ts=end, step_s=step_s, job=job, labels=labels,
                   by=by)
    for s in trend(conn, query=q, max_series=settings.trends_max_series)["series"]:
        pts = [(p["ts"], p["value"]) for p in s["points"]]
        for a in ann.comm_jumps(pts, threshold=settings.trends_jump_threshold, window=settings.trends_jump_window,
                                min_points=settings.trends_jump_min_points):
            if a["ts"] >= start:
                found.append({**a, "group": s["group"]})
    found.sort(key=lambda a: (a["ts"], a["kind"], str(a["group"])))
    limit = settings.trends_max_points
    return {"by": by, "job": job, "labels": labels, "from": start, "to": end, "step": step_s,
            "annotations": found[:limit], "truncated": len(found) > limit}
