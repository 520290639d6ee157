"""Acceptance runs (nccl-tests/rccl-tests, imported with `fabricscope import nccl-tests`) and the
baseline derived from them. POST is `ingest` scope (importers are feeds), GETs `read`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from fabricscope.core.busbw import FACTOR_FORM
from fabricscope.service import contract
from fabricscope.service.acceptance import store
from fabricscope.service.api.deps import CheapRead, ConnDep, IngestAuth, ReadAuth, answered, by_limit, by_size

router = APIRouter(prefix="/v1/acceptance", tags=["acceptance"])

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv", "gather",
             "scatter", "hypercube"]
assert set(Op.__args__) == set(FACTOR_FORM)  # type: ignore[attr-defined]  # one op vocabulary

MAX_ROWS = 10_000
MAX_DEVICES = 65_536
MAX_RANKS = 1 << 22

_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
LabelKey = Annotated[str, Field(pattern=contract.schema_pattern(contract.LABEL_KEY_BODY))]
Short = Annotated[StrictStr, Field(min_length=1, max_length=256)]
Int64 = Annotated[StrictInt, Field(ge=-contract.MAX_INT, le=contract.MAX_INT)]
Count = Annotated[StrictInt, Field(ge=0, le=contract.MAX_INT)]
NonNeg = Annotated[StrictFloat, Field(ge=0)]


class DeviceIn(BaseModel):
    model_config = _STRICT
    rank: Annotated[StrictInt, Field(ge=0, le=MAX_RANKS)]
    group: Int64 | None = None
    pid: Int64 | None = None
    host: Short | None = None
    device: Int64 | None = None
    bus_id: Annotated[StrictStr, Field(max_length=64)] | None = None
    name: Short | None = None


class RowIn(BaseModel):
    model_config = _STRICT
    size_bytes: Count
    count: Count | None = None
    type: Annotated[StrictStr, Field(max_length=32)] | None = None
    redop: Annotated[StrictStr, Field(max_length=32)] | None = None
    root: Annotated[StrictInt, Field(ge=-1, le=MAX_RANKS)] | None = None
    placement: Literal["out_of_place", "in_place"]
    time_us: NonNeg
    algbw_gbps: NonNeg
    busbw_gbps: NonNeg
    wrong: Count | None = Field(default=None, description="#wrong; null where the output says N/A or has no check")


class RunIn(BaseModel):
    """The parsed run, as `fabricscope import nccl-tests` posts it."""

    model_config = _STRICT
    fabric: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    labels: Annotated[dict[LabelKey, Annotated[StrictStr, Field(max_length=256)]], Field(max_length=64)] = {}
    op: Op
    library: Literal["nccl", "rccl"] | None = None
    started_at: Annotated[StrictFloat, Field(ge=contract.MIN_TS, le=4_102_444_800.0)] | None = Field(
        default=None, description="epoch seconds")
    ranks: Annotated[StrictInt, Field(ge=1, le=MAX_RANKS)]
    nodes: Annotated[StrictInt, Field(ge=1, le=MAX_RANKS)] | None = None
    threads: Annotated[StrictInt, Field(ge=1, le=65_536)] | None = None
    gpus_per_thread: Annotated[StrictInt, Field(ge=1, le=65_536)] | None = None
    versions: Annotated[dict[Annotated[str, Field(min_length=1, max_length=64)],
                             Annotated[StrictStr, Field(max_length=128)]], Field(max_length=32)] = {}
    command: Annotated[StrictStr, Field(max_length=4096)] | None = None
    devices: Annotated[list[DeviceIn], Field(max_length=MAX_DEVICES)] = []
    rows: Annotated[list[RowIn], Field(min_length=1, max_length=MAX_ROWS)]
    avg_busbw_gbps: NonNeg | None = None
    wrong_total: Count | None = None
    source: Annotated[StrictStr, Field(max_length=1024)] | None = None
    problems: Annotated[list[Annotated[StrictStr, Field(max_length=2048)]], Field(max_length=1000)] = []


class RunCreated(BaseModel):
    id: int
    rows: int


class RunOut(BaseModel):
    id: int
    fabric: str
    labels: dict[str, str]
    op: str
    library: str | None
    started_at: datetime | None
    ranks: int
    nodes: int | None
    threads: int | None
    gpus_per_thread: int | None
    versions: dict[str, str]
    command: str | None
    avg_busbw_gbps: float | None
    wrong_total: int | None
    source: str | None
    problems: list[str]
    created_at: datetime
    accepted: bool = Field(description="no wrong values: counted in baselines")
    rows: int = Field(description="rows stored")


class RowOut(BaseModel):
    size_bytes: int
    bucket: int
    count: int | None
    type: str | None
    redop: str | None
    root: int | None
    placement: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None


class RunDetail(RunOut):
    rows: list[RowOut]  # type: ignore[assignment]
    devices: list[dict[str, Any]]


class BaselineRow(BaseModel):
    fabric: str
    op: str
    bucket: int = Field(description="size bucket: largest power of two <= size (bytes)")
    ranks: int
    busbw_gbps: float
    runs: int = Field(description="accepted runs with a row in this bucket")


@router.post("/runs", dependencies=[IngestAuth], status_code=201, response_model=RunCreated,
             summary="Store a parsed nccl-tests/rccl-tests run")
def post_run(body: RunIn, conn: ConnDep) -> Any:
    run_id, n = store.insert_run(conn, run=body.model_dump())
    return {"id": run_id, "rows": n}


@router.get("/runs", dependencies=[ReadAuth, by_limit(100, 1000)], response_model=list[RunOut],
            summary="Acceptance runs, newest first")
def list_runs(
    conn: ConnDep,
    fabric: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    op: Annotated[Op | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    return store.list_runs(conn, fabric=fabric, op=op, limit=limit)


@router.get("/runs/{run_id}", dependencies=[ReadAuth, CheapRead], response_model=RunDetail,
            summary="One acceptance run with its rows and device lines")
def get_run(conn: ConnDep, run_id: int = Path(ge=1, lt=2**63)) -> Any:
    out = store.get_run(conn, run_id=run_id)
    if out is None:
        raise HTTPException(404, detail=f"acceptance run {run_id} does not exist")
    return out


@router.get("/baseline", dependencies=[ReadAuth, by_size("baseline")], response_model=list[BaselineRow],
            summary="Best or median busbw of accepted runs per (fabric, op, size bucket, ranks)")
def baseline(
    request: Request,
    conn: ConnDep,
    fabric: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    op: Annotated[Op | None, Query()] = None,
    ranks: Annotated[int | None, Query(ge=1, le=MAX_RANKS)] = None,
    nodes: Annotated[int | None, Query(ge=1, le=MAX_RANKS)] = None,
    stat: Annotated[Literal["best", "median"], Query()] = "median",
) -> Any:
    out = store.baseline(conn, fabric=fabric, op=op, ranks=ranks, nodes=nodes, stat=stat)
    answered(request, len(out))
    return out
