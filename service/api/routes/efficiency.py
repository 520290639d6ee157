"""GET /v1/jobs/{job}/efficiency: achieved bus bandwidth per (op, size bucket, group size) against
the fabric's acceptance baseline (service/acceptance/efficiency.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from fabricscope.service.acceptance.efficiency import job_efficiency
from fabricscope.service.api.deps import ConnDep, HeavyRead, ReadAuth
from fabricscope.service.api.params import JobName, known_job, window

router = APIRouter(prefix="/v1/jobs", tags=["answers"], dependencies=[ReadAuth])


class EfficiencyRow(BaseModel):
    op: str = Field(description="nccl-tests op (all_reduce, all_gather, reduce_scatter, alltoall, ...)")
    bucket: int = Field(description="size bucket of the nccl-tests size: largest power of two <= size")
    group_size: int
    collectives: int = Field(description="collective records (one per rank and collective)")
    bytes: float = Field(description="sum of the nccl-tests sizes")
    busbw_median_gbps: float
    busbw_p10_gbps: float
    baseline_busbw_gbps: float | None
    baseline_ranks: int | None
    baseline_runs: int | None
    scale: Literal["same", "nearest_smaller"] | None = Field(
        description="baseline at the same rank count, or the nearest smaller one measured; null: none")
    fraction: float | None = Field(description="busbw_median_gbps / baseline_busbw_gbps")
    fraction_p10: float | None = Field(description="busbw_p10_gbps / baseline_busbw_gbps")


class EfficiencyOut(BaseModel):
    job: str
    fabric: str | None = Field(description="?fabric=, else the job's label `fabric`; null: no baseline compared")
    stat: Literal["best", "median"]
    from_: datetime | None = Field(alias="from")
    to: datetime | None
    rows: list[EfficiencyRow]


@router.get("/{job}/efficiency", dependencies=[HeavyRead],
            response_model=EfficiencyOut, response_model_by_alias=True,
            summary="Achieved bus bandwidth vs the fabric's acceptance baseline, per op and size")
def efficiency(
    conn: ConnDep,
    job: str = JobName,
    fabric: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    from_: Annotated[datetime | None, Query(alias="from")] = None,
    to: Annotated[datetime | None, Query()] = None,
    stat: Annotated[Literal["best", "median"], Query(description="the baseline's statistic over runs")] = "median",
) -> Any:
    start, end = window(from_, to)
    known_job(conn, job)
    out = job_efficiency(conn, job=job, fabric=fabric, from_ts=start, to_ts=end, stat=stat)
    return {"job": job, "stat": stat, "from": from_, "to": to, **out}
