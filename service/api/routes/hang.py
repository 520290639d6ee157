"""GET /v1/jobs/{job}/hang: is the job hung, and which rank did not enter, or did not finish, the
collective the others wait in (service/hang)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from fabricscope.service.api.deps import CheapRead, ConnDep, ReadAuth, SettingsDep
from fabricscope.service.api.params import JobName, known_job
from fabricscope.service.hang.query import job_hang

router = APIRouter(prefix="/v1/jobs", tags=["answers"], dependencies=[ReadAuth])


class HangSuspect(BaseModel):
    rank: int
    host: str | None = Field(description="from the job's placement; null: the rank never registered")
    group: str | None = Field(description="null for a rank only NCCL RAS names")
    seq: int | None = Field(description="the collective's sequence number in the group")
    op: str | None
    state: Literal["not_entered", "not_finished", "ras_dead", "ras_unresponsive", "ras_missing"]
    source: Literal["collectives", "nccl_ras"] = Field(
        default="collectives", description="what named the rank: its collective records, or only an NCCL RAS report")
    ras_state: Literal["ras_dead", "ras_unresponsive", "ras_missing"] | None = Field(
        default=None, description="what the newest NCCL RAS report says of the rank, where it names it")
    ras_comm: str | None = Field(default=None, description="the NCCL communicator's hash RAS named the rank in")
    ras_host: str | None = Field(default=None, description="the node's address as RAS names it")
    ras_pid: int | None = Field(default=None, description="the rank's process id as RAS names it")


class HangOut(BaseModel):
    job: str
    hung: bool
    watched: bool = Field(description="the job's ranks send the hook's in-flight notices; false: never judged")
    ended: bool = Field(description="every announced rank exited cleanly")
    since: datetime | None = Field(description="end of the last step of any rank, when hung")
    threshold_s: float = Field(description="max(hang_floor_s, hang_factor x the job's median step time)")
    last_step_end: datetime | None
    checkpoint_since: datetime | None = Field(description="an announced checkpoint still in progress")
    suspects: list[HangSuspect]
    waiting: list[int] = Field(description="ranks blocked in the collective the suspects did not enter/finish")


def _ts(v: float | None) -> datetime | None:
    return None if v is None else datetime.fromtimestamp(v, UTC)


@router.get("/{job}/hang", dependencies=[CheapRead], response_model=HangOut,
            summary="Is the job hung, and which rank, in which collective")
def hang(conn: ConnDep, settings: SettingsDep, job: str = JobName) -> Any:
    known_job(conn, job)
    out = job_hang(conn, job=job, settings=settings)
    return {**out, "since": _ts(out["since"]), "last_step_end": _ts(out["last_step_end"]),
            "checkpoint_since": _ts(out["checkpoint_since"])}
