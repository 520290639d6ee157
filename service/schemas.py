"""Pydantic models of the v1 contract (docs/API.md). Ingest bodies are parsed by the fast path in
``service.ingest.validate``; their models here document the same shape in ``/openapi.json``, with
the constraints of ``service.contract`` (the one definition all three validators share)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from fabricscope.service import contract, freeform

# Unix epoch seconds or RFC 3339 with an offset; the range [min_ts, now + max_future_s] is a server
# setting, checked by the server, not here.
Timestamp = StrictFloat | AwareDatetime
NO_NUL = contract.schema_pattern(contract.TEXT_BODY)
Text = Annotated[StrictStr, Field(min_length=contract.MIN_TEXT, max_length=contract.MAX_TEXT, pattern=NO_NUL)]
JobName = Annotated[StrictStr, Field(min_length=contract.MIN_TEXT, max_length=contract.MAX_TEXT,
                                     pattern=contract.schema_pattern(contract.JOB_BODY))]
Name = Annotated[StrictStr, Field(pattern=contract.schema_pattern(contract.NAME_BODY))]
LabelKey = Annotated[str, Field(pattern=contract.schema_pattern(contract.LABEL_KEY_BODY))]
LabelValue = (Annotated[StrictStr, Field(max_length=contract.LABEL_VALUE_MAX_LEN, pattern=NO_NUL)]
              | Annotated[StrictInt, Field(ge=contract.MIN_INT, le=contract.MAX_INT)])
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=contract.MAX_LABELS),
                   AfterValidator(freeform.check_labels_size)]
Count = Annotated[StrictInt, Field(ge=contract.MIN_RANK, le=contract.MAX_INT)]
Rank = Annotated[StrictInt, Field(ge=contract.MIN_RANK, le=contract.MAX_INT32)]
Seconds = Annotated[StrictFloat, Field(ge=contract.MIN_PHASE_S, allow_inf_nan=False)]
# Free-form objects: depth, size, NUL and number bounds of service.contract (freeform.problem).
FreeForm = Annotated[dict[str, Any], AfterValidator(freeform.check)]
Speed = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Inventory = Annotated[str, Field(min_length=1, max_length=256, pattern=NO_NUL)]
Optional256 = Annotated[str, Field(max_length=256, pattern=NO_NUL)]


class _WithAttributes(BaseModel):
    """Extra keys are kept as the object's stored attributes: each one bounded like a free-form
    value one level down, all of them together within ``contract.MAX_OBJECT_BYTES``."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Annotated[Any, AfterValidator(freeform.check_member)]] = Field(init=False)

    @model_validator(mode="after")
    def _attributes_size(self) -> _WithAttributes:
        if self.model_extra:
            size = len(orjson.dumps(self.model_extra))
            if size > contract.MAX_OBJECT_BYTES:
                raise ValueError(f"extra attributes are {size} bytes as JSON, over the limit of "
                                 f"{contract.MAX_OBJECT_BYTES}")
        return self


class SampleIn(BaseModel):
    ts: Timestamp
    source: Text = Field(examples=["leaf1:Ethernet12"])
    metric: Name = Field(examples=["tx_pause_frames_total"])
    value: StrictFloat
    labels: Labels | None = Field(default=None, description="Integer values are stored as their decimal string.")
    discontinuity: bool | None = Field(
        default=None, description="The counter was reset before this value (device reboot, counter clear).")


class SamplesBatch(BaseModel):
    batch_id: Text | None = Field(default=None, description="Makes retries idempotent.")
    samples: list[SampleIn]


class StepIn(BaseModel):
    rank: Rank
    step: Count
    start: Timestamp
    end: Timestamp
    phases: Annotated[dict[str, Seconds], AfterValidator(freeform.check)] | None = Field(
        default=None, description="Seconds per phase.")


class StepsBatch(BaseModel):
    job: JobName
    batch_id: Text | None = None
    steps: list[StepIn]


class CollectiveIn(BaseModel):
    rank: Rank
    step: Count | None = None
    seq: Count | None = None
    op: Text
    bytes: Count | None = None
    start: Timestamp
    end: Timestamp
    group: Text | None = None
    group_size: Annotated[StrictInt, Field(ge=contract.MIN_GROUP_SIZE, le=contract.MAX_INT32)] | None = None


class CollectivesBatch(BaseModel):
    job: JobName
    batch_id: Text | None = None
    collectives: list[CollectiveIn]


class CollectiveSummaryIn(BaseModel):
    rank: Rank
    step: Count
    op: Text
    bucket: Count = Field(description="the largest power of 4 at or below the collectives' bytes; 0: no bytes")
    group_size: Annotated[StrictInt, Field(ge=contract.MIN_GROUP_SIZE, le=contract.MAX_INT32)] | None = None
    count: Annotated[StrictInt, Field(ge=1, le=contract.MAX_INT)]
    total_s: Seconds
    max_s: Seconds
    bytes: Count | None = None
    slowest_group: Text | None = None
    slowest_seq: Count | None = None
    start: Timestamp = Field(description="the first summarized collective's start")
    end: Timestamp = Field(description="the last one's end")


class CollectiveSummariesBatch(BaseModel):
    job: JobName
    batch_id: Text | None = None
    collective_summaries: list[CollectiveSummaryIn]


class EventIn(BaseModel):
    kind: Name = Field(examples=["pfc_storm"])
    source: Text
    job: JobName | None = None
    start: Timestamp
    end: Timestamp | None = None
    attrs: FreeForm | None = None


class EventsBatch(BaseModel):
    batch_id: Text | None = None
    events: list[EventIn]


class IngestResult(BaseModel):
    accepted: int
    duplicate: bool | None = Field(default=None, description="True when this batch id was already applied.")


class Interface(_WithAttributes):
    name: Inventory
    speed_bps: Speed | None = None


class Device(_WithAttributes):
    name: str = Field(min_length=1, max_length=256, pattern=r"^[^:\s\x00]+$")
    kind: Literal["switch", "host", "storage"]
    interfaces: list[Interface] | None = None


class Link(BaseModel):
    a: Text = Field(examples=["node07:mlx5_2"])
    b: Text = Field(examples=["leaf1:Ethernet12"])
    speed_bps: Speed | None = None
    discovered: bool | None = None

    @model_validator(mode="after")
    def _ends_size(self) -> Link:
        size = len(self.a.encode(errors="replace")) + len(self.b.encode(errors="replace"))
        if size > contract.LINK_ENDS_MAX_BYTES:
            raise ValueError(f"a and b are {size} bytes together (UTF-8), over the limit of "
                             f"{contract.LINK_ENDS_MAX_BYTES}")
        return self


class Topology(BaseModel):
    devices: list[Device] = []
    links: list[Link] = []


class LinksMerge(BaseModel):
    links: list[Link]
    discovered: bool = True


# -- rank locality (issue #17: the GPU-to-NIC placement audit, GET /v1/jobs/{job}/placement) --------
PciAddress = Annotated[StrictStr, Field(pattern=contract.schema_pattern(contract.PCI_ADDRESS_BODY))]
PciePath = Annotated[list[Annotated[StrictStr, Field(pattern=contract.schema_pattern(contract.PCIE_PATH_ITEM_BODY))]],
                     Field(max_length=contract.MAX_PCIE_PATH)]
NumaNode = Annotated[StrictInt, Field(ge=0, le=contract.MAX_NUMA_NODE)]
NodeList = Annotated[list[NumaNode], Field(max_length=contract.MAX_NODE_LIST)]
NcclEnv = Annotated[StrictStr, Field(max_length=contract.NCCL_ENV_MAX_LEN, pattern=NO_NUL)]


class PcieLinkState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gen: Annotated[StrictInt, Field(ge=1, le=contract.MAX_PCIE_GEN)] | None = None
    width: Annotated[StrictInt, Field(ge=1, le=contract.MAX_PCIE_WIDTH)] | None = None
    max_gen: Annotated[StrictInt, Field(ge=1, le=contract.MAX_PCIE_GEN)] | None = None
    max_width: Annotated[StrictInt, Field(ge=1, le=contract.MAX_PCIE_WIDTH)] | None = None


class Locality(_WithAttributes):
    """Where a rank's GPU and NIC sit on the host (collectors/host/pcie.py reads it from sysfs)."""

    gpu_pci: PciAddress | None = None
    gpu_numa: NumaNode | None = None
    gpu_pcie_path: PciePath | None = None
    gpu_link: PcieLinkState | None = None
    nic_pci: PciAddress | None = None
    nic_numa: NumaNode | None = None
    nic_pcie_path: PciePath | None = None
    nic_link: PcieLinkState | None = None
    nic_nearest: Optional256 | None = Field(default=None, description="The NIC nearest the GPU on the PCIe tree")
    cpus: Annotated[StrictStr, Field(max_length=contract.CPULIST_MAX_LEN,
                                     pattern=contract.schema_pattern(contract.CPULIST_BODY))] | None = None
    cpu_numa: NodeList | None = None
    mem_nodes: NodeList | None = None
    nccl_ib_hca: NcclEnv | None = None
    nccl_socket_ifname: NcclEnv | None = None


class RankPlacement(_WithAttributes):
    rank: int = Field(ge=0, le=contract.MAX_INT32)
    host: Inventory
    local_rank: int | None = Field(default=None, ge=0, le=contract.MAX_INT32)
    gpu: Optional256 | None = None
    nic: Optional256 | None = None
    locality: Locality | None = None


class JobIn(BaseModel):
    ranks: list[RankPlacement] = []
    labels: FreeForm = {}


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
    # the rule that judged the step (docs/correlation-engine.md, rule catalogue); null: not judged yet,
    # `slow` is then the baseline's flag until the background pass judges it
    verdict: str | None = None


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
    rule: str | None = None  # a "corroborated" row: the promotion rule that made the step slow


class Cause(BaseModel):
    layer: str
    component: str | None
    lost_s: float
    confidence: float
    rule: str | None = None  # the cause rule that named it (docs/correlation-engine.md, rule catalogue)


class Rules(BaseModel):
    """The rule ids that decided an answer (docs/correlation-engine.md, rule catalogue)."""

    verdict: str
    cause: str | None
    adjust: list[str] = []


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
    rules: Rules | None = None  # which rules decided the verdict and the cause


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
    "collective_summaries": CollectiveSummariesBatch,
}
