"""PUT/GET /v1/jobs/{job} (rank placement) and GET /v1/jobs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request

from fabricscope.service.api.deps import CheapRead, ConnDep, IngestAuth, ReadAuth, answered, by_size
from fabricscope.service.api.params import JobName
from fabricscope.service.db import inventory
from fabricscope.service.schemas import JobIn, JobOut

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.put("/{job}", dependencies=[IngestAuth], response_model=JobOut, summary="Register a job's rank placement")
def put_job(body: JobIn, conn: ConnDep, job: str = JobName) -> Any:
    ranks = [r.model_dump(exclude_none=True) for r in body.ranks]
    seen: set[int] = set()
    for i, r in enumerate(ranks):
        if r["rank"] in seen:
            raise HTTPException(422, detail=[{"loc": ["body", "ranks", i, "rank"],
                                              "msg": f"rank {r['rank']} appears twice", "type": "value_error"}])
        seen.add(r["rank"])
    try:
        inventory.put_job(conn, job=job, ranks=ranks, labels=body.labels)
    except inventory.JobLabelsTooLarge as exc:
        raise HTTPException(422, detail=[{"loc": ["body", "labels"], "msg": str(exc), "type": "value_error"}]) from exc
    return inventory.get_job(conn, job=job)


@router.get("", dependencies=[ReadAuth, by_size("jobs")], summary="List jobs")
def list_jobs(request: Request, conn: ConnDep) -> list[dict[str, Any]]:
    out = inventory.list_jobs(conn)
    answered(request, len(out))
    return out


@router.get("/{job}", dependencies=[ReadAuth, CheapRead], response_model=JobOut, summary="A job and its rank placement")
def get_job(conn: ConnDep, job: str = JobName) -> Any:
    out = inventory.get_job(conn, job=job)
    if out is None:
        raise HTTPException(404, detail=f"job '{job}' is unknown")
    return out
