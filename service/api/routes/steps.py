"""The answers: slow steps, per-step attribution and per-job report (service/correlate)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query

from fabricscope.service.acceptance.efficiency import report_section
from fabricscope.service.api import admission
from fabricscope.service.api.deps import ConnDep, EngineDep, HeavyRead, ReadAuth, SettingsDep, admit
from fabricscope.service.api.params import JobName, known_job, window
from fabricscope.service.placement.audit import warnings as placement_warnings
from fabricscope.service.placement.store import job_audit
from fabricscope.service.schemas import Attribution, StepRow

router = APIRouter(prefix="/v1/jobs", tags=["answers"], dependencies=[ReadAuth])


@router.get("/{job}/steps", dependencies=[HeavyRead],
            response_model=list[StepRow], summary="Steps of a job with baseline and slow flag")
def list_steps(
    conn: ConnDep,
    engine: EngineDep,
    job: str = JobName,
    from_: Annotated[datetime | None, Query(alias="from")] = None,
    to: Annotated[datetime | None, Query()] = None,
    slow: Annotated[bool, Query(description="Only slow steps")] = False,
) -> Any:
    start, end = window(from_, to)
    known_job(conn, job)
    return engine.list_steps(conn, job=job, from_ts=start, to_ts=end, slow_only=slow)


# One step's attribution reads every component's telemetry over the step's window: half a unit
# (the report, which attributes every step, costs a whole one).
_ONE_STEP = Depends(admit("one step's attribution", lambda _, __: admission.SHARES // 2))


# exclude_unset: evidence keys a row does not have (labels, rank, kind) stay absent rather than null.
@router.get("/{job}/steps/{step}/attribution", dependencies=[_ONE_STEP], response_model=Attribution,
            response_model_exclude_unset=True,
            summary="Why was this step slow: layer, component, confidence, evidence")
def attribution(conn: ConnDep, engine: EngineDep, job: str = JobName, step: int = Path(ge=0, lt=2**63)) -> Any:
    known_job(conn, job)
    out = engine.attribute_step(conn, job=job, step=step, store=True)  # timed inside (fabricscope_attribution_seconds)
    if out is None:
        raise HTTPException(404, detail=f"job '{job}' has no step {step}")
    return out


@router.get("/{job}/report", dependencies=[HeavyRead],
            summary="Time lost per layer and per component, worst first")
def report(
    conn: ConnDep,
    engine: EngineDep,
    settings: SettingsDep,
    job: str = JobName,
    from_: Annotated[datetime | None, Query(alias="from")] = None,
    to: Annotated[datetime | None, Query()] = None,
) -> dict[str, Any]:
    start, end = window(from_, to)
    known_job(conn, job)
    out = engine.job_report(conn, job=job, from_ts=start, to_ts=end)
    # #19: bus bandwidth against the fabric's acceptance baseline (one query)
    out["efficiency"] = report_section(conn, job=job, from_ts=start, to_ts=end,
                                       threshold=settings.alert_busbw_fraction)
    # #17: GPU-to-NIC locality flags of the job's ranks (GET /v1/jobs/{job}/placement has the detail)
    placed = job_audit(conn, job=job, gpus_per_nic=settings.placement_gpus_per_nic)
    out["placement_warnings"] = placement_warnings(placed) if placed is not None else []
    return out
