"""Pydantic models of the v1 contract (docs/API.md). Ingest bodies are parsed by the fast path in
``service.ingest.validate``; their models here document the same shape in ``/openapi.json``, with
the constraints of ``service.contract`` (the one definition all three validators share)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from fabricscope.service import contract

# Unix epoch seconds or RFC 3339 with an offset; the range [min_ts, now + max_future_s] is a server
# setting, checked by the server, not here.
Timestamp = StrictFloat | AwareDatetime
Text = Annotated[StrictStr, Field(min_length=contract.MIN_TEXT, max_length=contract.MAX_TEXT)]
Name = Annotated[StrictStr, Field(pattern=contract.schema_pattern(contract.NAME_BODY))]
LabelKey = Annotated[str, Field(pattern=contract.schema_pattern(contract.LABEL_KEY_BODY))]
Count = Annotated[StrictInt, Field(ge=contract.MIN_RANK, le=contract.MAX_INT)]
Seconds = Annotated[StrictFloat, Field(ge=contract.MIN_PHASE_S)]


class SampleIn(BaseModel):
    ts: Timestamp
    source: Text = Field(examples=["leaf1:Ethernet12"])
    metric: Name = Field(examples=["tx_pause_frames_total"])
    value: StrictFloat
    labels: dict[LabelKey, StrictStr | StrictInt] | None = Field(
        default=None, description="Integer values are stored as their decimal string.")
    discontinuity: bool | None = Field(
        default=None, description="The counter was reset before this value (device reboot, counter clear).")


class SamplesBatch(BaseModel):
    batch_id: Text | None = Field(default=None, description="Makes retries idempotent.")
    samples: list[SampleIn]


class StepIn(BaseModel):
    rank: Count
    step: Count
    start: Timestamp
    end: Timestamp
    phases: dict[str, Seconds] | None = Field(default=None, description="Seconds per phase.")


class StepsBatch(BaseModel):
    job: Text
    batch_id: Text | None = None
    steps: list[StepIn]


class CollectiveIn(BaseModel):
    rank: Count
    step: Count | None = None
    seq: Count | None = None
    op: Text
    bytes: Count | None = None
    start: Timestamp
    end: Timestamp
    group: Text | None = None
    group_size: Annotated[StrictInt, Field(ge=contract.MIN_GROUP_SIZE, le=contract.MAX_INT)] | None = None


class CollectivesBatch(BaseModel):
    job: Text
    batch_id: Text | None = None
    collectives: list[CollectiveIn]


class EventIn(BaseModel):
    kind: Name = Field(examples=["pfc_storm"])
    source: Text
    job: Text | None = None
    start: Timestamp
    end: Timestamp | None = None
    attrs: dict[str, Any] | None = None


class EventsBatch(BaseModel):
    batch_id: Text | None = None
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
