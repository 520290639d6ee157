"""GET/POST /v1/jobs/{job}/detail_requests: the steps whose full collective records the service wants
from ranks in bounded mode (#45 item 3). The hook polls with its ingest token, so both take ``ingest``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from fabricscope.service import contract
from fabricscope.service.api.deps import CheapRead, ConnDep, IngestAuth
from fabricscope.service.api.params import JobName, known_job
from fabricscope.service.ingest import detail
from fabricscope.service.schemas import Count, Rank, Text

router = APIRouter(prefix="/v1/jobs", tags=["ingest"], dependencies=[IngestAuth])


class DetailRequest(BaseModel):
    id: int
    step: int
    rank: int | None = Field(description="null: every rank")
    reason: str | None
    requested_at: datetime


class DetailRequests(BaseModel):
    job: str
    requests: list[DetailRequest]


class DetailRequestIn(BaseModel):
    steps: Annotated[list[Count], Field(min_length=1, max_length=1024)]
    ranks: Annotated[list[Rank], Field(min_length=1, max_length=1 << 16)] | None = Field(
        default=None, description="null or absent: every rank")
    reason: Text | None = None


@router.get("/{job}/detail_requests", dependencies=[CheapRead], response_model=DetailRequests,
            summary="Steps the service asks ranks to send in full (polled by the hook)")
def list_requests(conn: ConnDep, job: str = JobName,
                  rank: Annotated[int | None, Query(ge=0, le=contract.MAX_INT32)] = None,
                  after: Annotated[int, Query(ge=0, le=contract.MAX_INT)] = 0) -> Any:
    # an unknown job has asked for nothing yet: a rank polling before its placement landed gets []
    return {"job": job, "requests": detail.pending(conn, job=job, rank=rank, after=after)}


@router.post("/{job}/detail_requests", response_model=DetailRequests, status_code=201,
             summary="Ask the ranks of a job for the full collective records of some steps")
def post_requests(body: DetailRequestIn, conn: ConnDep, job: str = JobName) -> Any:
    known_job(conn, job)
    made = detail.request(conn, job=job, steps=body.steps, ranks=body.ranks, reason=body.reason)
    conn.commit()
    return {"job": job, "requests": made}
