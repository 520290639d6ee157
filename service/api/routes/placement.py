"""GET /v1/jobs/{job}/placement: the GPU-to-NIC locality audit of a job's ranks (issue #17)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from fabricscope.service.api.deps import CheapRead, ConnDep, ReadAuth, SettingsDep
from fabricscope.service.api.params import JobName
from fabricscope.service.placement.store import job_audit

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], dependencies=[ReadAuth])


@router.get("/{job}/placement", dependencies=[CheapRead],
            summary="GPU and NIC locality per rank, with cross-NUMA and other flags")
def placement(conn: ConnDep, settings: SettingsDep, job: str = JobName) -> dict[str, Any]:
    out = job_audit(conn, job=job, gpus_per_nic=settings.placement_gpus_per_nic)
    if out is None:
        raise HTTPException(404, detail=f"job '{job}' is unknown")
    return out
