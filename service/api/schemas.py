"""Pydantic models of the v1 contract (API.md). Ingest bodies are parsed by the fast path in
``service.ingest.validate``; their models here document the same shape in ``/openapi.json``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Timestamp = float | datetime  # Unix epoch seconds or RFC 3339 with offset


class SampleIn(BaseModel):
    ts: Timestamp
    source: str = Field(min_length=1, max_length=512, examples=["leaf1:Ethernet12"])
    metric: str = Field(pattern=r"^[a-z][a-z0-9_]{0,127}$", examples=["tx_pause_frames_total"])
    value: float
    labels: dict[str, str] | None = None
    discontinuity: bool | None = Field(
        default=None, description="The counter was reset before this value (device reboot, counter clear).")


class SamplesBatch(BaseModel):
    batch_id: str | None = Field(default=None, max_length=512, description="Makes retries idempotent.")
    samples: list[SampleIn]


class StepIn(BaseModel):
    rank: int = Field(ge=0)
    step: int = Field(ge=0)
    start: Timestamp
    end: Timestamp
    phases: dict[str, float] | None = Field(default=None, description="Seconds per phase.")


class StepsBatch(BaseModel):
    job: str = Field(min_length=1, max_length=512)
    batch_id: str | None = Field(default=None, max_length=512)
    steps: list[StepIn]


class CollectiveIn(BaseModel):
    rank: int = Field(ge=0)
    step: int | None = Field(default=None, ge=0)
    seq: int | None = Field(default=None, ge=0)
    op: str = Field(min_length=1, max_length=512)
    bytes: int | None = Field(default=None, ge=0)
    start: Timestamp
    end: Timestamp
    group: str | None = None
    group_size: int | None = Field(default=None, ge=1)


class CollectivesBatch(BaseModel):
    job: str = Field(min_length=1, max_length=512)
    batch_id: str | None = Field(default=None, max_length=512)
    collectives: list[CollectiveIn]


class EventIn(BaseModel):
    kind: str = Field(pattern=r"^[a-z][a-z0-9_]{0,127}$", examples=["pfc_storm"])
    source: str = Field(min_length=1, max_length=512)
    job: str | None = None
    start: Timestamp
    end: Timestamp | None = None
    attrs: dict[str, Any] | None = None


class EventsBatch(BaseModel):
    batch_id: str | None = Field(default=None, max_length=512)
    events: list[EventIn]


class IngestResult(BaseModel):
    accepted: int
    duplicate: bool | None = Field(default=None, description="True when this batch id was already applied.")


class Interface(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=256)
    speed_bps: float | None = Field(default=None, ge=0)


class Device(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=256, pattern=r"^[^:\s]+$")
    kind: Literal["switch", "host", "storage"]
    interfaces: list[Interface] | None = None


class Link(BaseModel):
    a: str = Field(min_length=1, max_length=512, examples=["node07:mlx5_2"])
    b: str = Field(min_length=1, max_length=512, examples=["leaf1:Ethernet12"])
    speed_bps: float | None = Field(default=None, ge=0)
    discovered: bool | None = None


class Topology(BaseModel):
    devices: list[Device] = []
    links: list[Link] = []


class LinksMerge(BaseModel):
    links: list[Link]
    discovered: bool = True


class RankPlacement(BaseModel):
    model_config = ConfigDict(extra="allow")
    rank: int = Field(ge=0)
    host: str = Field(min_length=1, max_length=256)
    local_rank: int | None = Field(default=None, ge=0)
    gpu: str | None = None
    nic: str | None = None


class JobIn(BaseModel):
    ranks: list[RankPlacement] = []
    labels: dict[str, Any] = {}


class JobOut(BaseModel):
    job: str
    labels: dict[str, Any]
    ranks: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime


class StepRow(BaseModel):
    step: int
    start: datetime
    duration_s: float
    baseline_s: float | None
    slow: bool


class Evidence(BaseModel):
    source: str
    metric: str
    value: float | None
    baseline: float | None
    score: float
    # Optional extras (the engine's records.EvidenceRow): absent keys are left out of responses.
    labels: dict[str, str] | None = None
    unit: str | None = None  # "per_second" (counter rate), "value" (gauge) or "seconds" (a timing)
    rank: int | None = None  # the straggling rank, for timing evidence
    kind: str | None = None  # "timing" for a rank's phase time; telemetry rows have none


class Cause(BaseModel):
    layer: str
    component: str | None
    lost_s: float
    confidence: float


class Attribution(BaseModel):
    model_config = ConfigDict(extra="allow")
    step: int
    slow: bool
    duration_s: float | None
    baseline_s: float | None
    start: str | None = None  # RFC 3339 start of the step (median over ranks)
    layer: str
    component: str | None
    confidence: float
    lost_s: float
    evidence: list[Evidence]
    causes: list[Cause] = []  # every cause of the lost time, worst first; the top one is layer/component


class SeriesPoint(BaseModel):
    ts: datetime
    value: float | None
    rate: float | None


class SeriesOut(BaseModel):
    source: str
    metric: str
    labels: dict[str, str]
    points: list[SeriesPoint]


INGEST_MODELS: dict[str, type[BaseModel]] = {
    "samples": SamplesBatch,
    "steps": StepsBatch,
    "collectives": CollectivesBatch,
    "events": EventsBatch,
}
