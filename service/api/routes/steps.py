"""The answers: slow steps, per-step attribution and per-job report (service/correlate)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query

from fabricscope.service.acceptance.efficiency import report_section
from fabricscope.service.api.deps import ConnDep, EngineDep, ReadAuth, SettingsDep
from fabricscope.service.schemas import Attribution, StepRow

router = APIRouter(prefix="/v1/jobs", tags=["answers"], dependencies=[ReadAuth])

JobName = Path(min_length=1, max_length=512)


def _known_job(conn: ConnDep, job: str) -> None:
    if conn.execute("SELECT 1 FROM jobs WHERE name = %s", (job,)).fetchone() is None:
        raise HTTPException(404, detail=f"job '{job}' is unknown")


def _tz(value: datetime | None, field: str) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise HTTPException(422, detail=[{"loc": ["query", field], "msg": "timestamp needs a time zone offset",
                                          "type": "timestamp_parsing"}])
    return value


@router.get("/{job}/steps", response_model=list[StepRow], summary="Steps of a job with baseline and slow flag")
def list_steps(
    conn: ConnDep,
    engine: EngineDep,
    job: str = JobName,
    from_: Annotated[datetime | None, Query(alias="from")] = None,
    to: Annotated[datetime | None, Query()] = None,
    slow: Annotated[bool, Query(description="Only slow steps")] = False,
) -> Any:
    _known_job(conn, job)
    return engine.list_steps(conn, job=job, from_ts=_tz(from_, "from"), to_ts=_tz(to, "to"), slow_only=slow)


# exclude_unset: evidence keys a row does not have (labels, rank, kind) stay absent rather than null.
@router.get("/{job}/steps/{step}/attribution", response_model=Attribution, response_model_exclude_unset=True,
            summary="Why was this step slow: layer, component, confidence, evidence")
def attribution(conn: ConnDep, engine: EngineDep, job: str = JobName, step: int = Path(ge=0, lt=2**63)) -> Any:
    _known_job(conn, job)
    out = engine.attribute_step(conn, job=job, step=step, store=True)  # timed inside (fabricscope_attribution_seconds)
    if out is None:
        raise HTTPException(404, detail=f"job '{job}' has no step {step}")
    return out


@router.get("/{job}/report", summary="Time lost per layer and per component, worst first")
def report(
    conn: ConnDep,
    engine: EngineDep,
    settings: SettingsDep,
    job: str = JobName,
    from_: Annotated[datetime | None, Query(alias="from")] = None,
    to: Annotated[datetime | None, Query()] = None,
) -> dict[str, Any]:
    _known_job(conn, job)
    from_ts, to_ts = _tz(from_, "from"), _tz(to, "to")
    out = engine.job_report(conn, job=job, from_ts=from_ts, to_ts=to_ts)
    # #19: bus bandwidth against the fabric's acceptance baseline (one query)
    out["efficiency"] = report_section(conn, job=job, from_ts=from_ts, to_ts=to_ts,
                                       threshold=settings.alert_busbw_fraction)
    return out
